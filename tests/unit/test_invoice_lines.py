"""Whether an invoice's lines are all of them (ledger/purchase_fields.py keeps the flag with
the lines, ledger/purchase_invoice.py reads it): Stripe's event carries the first page only,
and the ledger's cap may cut more; lines read from Stripe's API replace both."""

import json

import orjson

from ledger.purchase import purchase_of
from ledger.purchase_fields import MAX_VALUE, invoice_line, purchase_fields
from tests.support.purchases import invoice_lines


def invoice(carried: int, has_more: bool, description: str = "") -> dict:
    """An invoice as its event carries it: ``carried`` lines, ``has_more`` as Stripe says."""
    lines = invoice_lines(carried, "in_1")
    for line in lines:
        line["description"] += description
    return {
        "object": "invoice",
        "id": "in_1",
        "lines": {"object": "list", "data": lines, "has_more": has_more},
    }


def test_lines_stripe_left_out_are_flagged() -> None:
    fields = purchase_fields(invoice(10, has_more=True))
    assert len(json.loads(fields["p_in_lines"])) == 10 and fields["p_in_more"] == "1"


def test_lines_the_cap_cut_are_flagged() -> None:
    fields = purchase_fields(invoice(1000, has_more=False, description=" " * 150))
    kept = fields["p_in_lines"]
    assert len(kept.encode()) <= MAX_VALUE and len(json.loads(kept)) < 1000
    assert fields["p_in_more"] == "1"


def test_lines_all_there_are_flagged_so() -> None:
    fields = purchase_fields(invoice(20, has_more=False))
    assert len(json.loads(fields["p_in_lines"])) == 20 and fields["p_in_more"] == "0"


def test_an_invoice_without_its_lines_list_has_no_flag() -> None:
    fields = purchase_fields({"object": "invoice", "id": "in_1"})
    assert "p_in_lines" not in fields and "p_in_more" not in fields


def test_an_invoice_of_no_lines_says_they_are_all_there() -> None:
    empty = purchase_fields(invoice(0, has_more=False))
    assert empty["p_in_lines"] == "[]" and empty["p_in_more"] == "0"
    got = purchase_of("in_1", 1, empty)
    assert got.invoice is not None and got.invoice.lines_complete is True


def test_an_invoice_only_a_payment_intent_named_has_lines_not_known() -> None:
    """Fulfilled before any invoice event came: its lines are not known, so not complete
    (with INVOICE_LINES they are read: tests/integration/test_invoice_lines.py)."""
    named = purchase_fields({"object": "payment_intent", "id": "pi_1", "invoice": "in_1"})
    got = purchase_of("pi_1", 1, named)
    assert got.invoice is not None and got.invoice.lines == []
    assert got.invoice.lines_complete is False


def test_the_purchase_says_whether_its_lines_are_all_of_them() -> None:
    some = purchase_of("in_1", 1, purchase_fields(invoice(10, has_more=True)))
    assert some.invoice is not None and len(some.invoice.lines) == 10
    assert some.invoice.lines_complete is False
    every = purchase_of("in_1", 1, purchase_fields(invoice(10, has_more=False)))
    assert every.invoice is not None and every.invoice.lines_complete is True
    assert every.to_dict()["invoice"]["lines_complete"] is True


def test_lines_kept_without_the_flag_are_taken_as_complete() -> None:
    """An earlier release kept lines and claimed nothing about the rest."""
    old = '[{"id":"il_1","description":null,"quantity":1,"amount":500,"currency":"usd",'
    old += '"price":"price_1","product":"prod_1"}]'
    got = purchase_of("in_1", 1, {"p_in": "in_1", "p_in_lines": old})
    assert got.invoice is not None and got.invoice.lines_complete is True
    assert [x.id for x in got.invoice.lines] == ["il_1"]


def test_lines_read_from_stripe_s_api_are_given_instead_of_the_event_s() -> None:
    fields = purchase_fields(invoice(10, has_more=True))
    every = purchase_fields(invoice(250, has_more=False))["p_in_lines"]
    got = purchase_of("in_1", 1, {**fields, "p_in_lines_all": every})
    assert got.invoice is not None and got.invoice.lines_complete is True
    assert [x.id for x in got.invoice.lines] == [x["id"] for x in invoice_lines(250, "in_1")]


def test_lines_read_from_stripe_s_api_are_not_capped() -> None:
    """They are kept apart from the event's, as Checkout's line items are (``p_items``)."""
    lines = invoice_lines(1000, "in_1")
    for line in lines:
        line["description"] += " " * 150
    every = orjson.dumps([invoice_line(x) for x in lines])
    assert len(every) > MAX_VALUE
    fields = {"p_in": "in_1", "p_in_more": "1", "p_in_lines_all": every.decode()}
    got = purchase_of("in_1", 1, fields)
    assert got.invoice is not None and len(got.invoice.lines) == 1000
    assert got.invoice.lines_complete is True
