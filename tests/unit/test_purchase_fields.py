"""What a payment keeps of each object its events carry (ledger/purchase_fields.py), on real
payload shapes of several API versions: ids and what was bought, never card details."""

import json
from pathlib import Path

import orjson
import pytest

from ledger.purchase import purchase_of
from ledger.purchase_fields import MAX_VALUE, invoice_line, purchase_fields
from ledgerctl import samples

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stripe"


def obj(event_type: str) -> dict:
    return json.loads(samples.template(event_type))["data"]["object"]


def test_a_payment_intent_of_api_2020_gives_its_succeeded_charge_not_its_card() -> None:
    pi = obj("payment_intent.succeeded")
    pi["charges"]["data"][0]["id"] = "ch_paid"
    pi["metadata"] = {"order": "7"}
    pi["shipping"] = None
    fields = purchase_fields(pi)
    assert fields == {"p_charge": "ch_paid", "p_md_pi": '{"order":"7"}'}
    assert "payment_method_details" not in json.dumps(fields)


def test_a_payment_intent_of_a_later_api_names_latest_charge() -> None:
    pi = {"object": "payment_intent", "id": "pi_1", "latest_charge": "ch_9", "customer": "cus_1"}
    assert purchase_fields(pi) == {"p_charge": "ch_9", "p_customer": "cus_1"}


def test_only_a_subscription_s_payment_intent_is_kept_apart_from_its_key() -> None:
    """Any other PaymentIntent is its payment's key already; a subscription's (it names its
    invoice) may join a payment its session began, keyed by the session."""
    pi = {"object": "payment_intent", "id": "pi_1", "invoice": "in_1"}
    assert purchase_fields(pi) == {"p_pi": "pi_1", "p_in": "in_1"}


def test_a_charge_gives_its_id_customer_and_shipping_only() -> None:
    charge = obj("charge.succeeded")
    charge.update(id="ch_1", customer="cus_1", payment_intent="pi_1")
    fields = purchase_fields(charge)
    assert json.loads(fields.pop("p_pi_ship"))[0] == "Jenny Rosen"
    assert fields == {"p_charge": "ch_1", "p_customer": "cus_1"}


def test_a_subscription_renewal_invoice_as_stripe_sent_it() -> None:
    event = json.loads((FIXTURES / "invoice.paid.subscription_cycle.json").read_text())
    fields = purchase_fields(event["data"]["object"])
    got = purchase_of("in_1KJqKBJDPojXS6LNJbvLUgEy", 1, fields)
    assert got.invoice is not None
    assert (got.invoice.id, got.invoice.subscription, got.invoice.billing_reason) == (
        "in_1KJqKBJDPojXS6LNJbvLUgEy",
        "sub_JsuPyCPhXWfZar",
        "subscription_cycle",
    )
    [line] = got.invoice.lines
    assert (line.price, line.product, line.quantity, line.amount) == (
        "price_1IDQm5JDPojXS6LNM31hxKzp",
        "prod_Ip4vqwv3EJ7Mi0",
        1,
        0,
    )
    assert got.customer == "cus_JsuO3bmrj0QlAw" and got.subscription == "sub_JsuPyCPhXWfZar"
    assert got.payment_intent is None and got.metadata.invoice == {}
    # what to grant and until when: the subscription's metadata is on its line, not the invoice
    assert line.period is not None and (line.period.start, line.period.end) == (
        1642645280,
        1645323680,
    )
    assert line.metadata["project_id"] == "295" and len(line.metadata) == 5


def test_an_invoice_of_api_basil_names_its_subscription_and_price_in_new_places() -> None:
    invoice = {
        "object": "invoice",
        "id": "in_1",
        "billing_reason": "subscription_create",
        "parent": {"subscription_details": {"subscription": "sub_1"}},
        "lines": {
            "data": [
                {
                    "id": "il_1",
                    "amount": 500,
                    "quantity": 2,
                    "pricing": {"price_details": {"price": "price_1", "product": "prod_1"}},
                }
            ]
        },
    }
    got = purchase_of("in_1", 1, purchase_fields(invoice))
    assert got.subscription == "sub_1" and got.invoice is not None
    assert (got.invoice.lines[0].price, got.invoice.lines[0].product) == ("price_1", "prod_1")
    assert (got.invoice.lines[0].period, got.invoice.lines[0].metadata) == (None, {})


def test_lines_kept_before_periods_and_metadata_read_as_none_and_empty() -> None:
    """A payment recorded by an earlier release keeps lines without either: still read."""
    old = '[{"id":"il_1","description":null,"quantity":1,"amount":500,"currency":"usd",'
    old += '"price":"price_1","product":"prod_1"}]'
    got = purchase_of("in_1", 1, {"p_in": "in_1", "p_in_lines": old})
    assert got.invoice is not None and [
        (x.id, x.period, x.metadata) for x in got.invoice.lines
    ] == [("il_1", None, {})]


def test_a_session_gives_who_bought_and_its_own_metadata() -> None:
    session = obj("checkout.session.completed")
    session.update(client_reference_id="order_1", metadata={"a": "1"}, payment_link="plink_1")
    session["customer_details"]["name"] = "Jenny Rosen"
    got = purchase_of("pi_1", 1, purchase_fields(session))
    assert got.checkout_session is not None
    assert got.checkout_session.customer_details.email == "stripe@example.com"
    assert (got.client_reference_id, got.customer_name) == ("order_1", "Jenny Rosen")
    assert got.checkout_session.payment_link == "plink_1"  # which link was bought
    assert got.metadata.checkout_session == {"a": "1"}
    assert got.metadata.payment_intent == {} and got.metadata.invoice is None


def test_a_session_gives_what_its_custom_fields_collected() -> None:
    session = obj("checkout.session.completed")
    session["custom_fields"] = [
        {"key": "engraving", "label": {"custom": "Engraving", "type": "custom"},
         "optional": False, "type": "text", "text": {"maximum_length": None, "value": "Jane"}},
        {"key": "size", "optional": False, "type": "dropdown",
         "dropdown": {"options": [{"label": "Large", "value": "l"}], "value": "l"}},
        {"key": "floor", "optional": True, "type": "numeric", "numeric": {"value": None}},
        {"label": {"custom": "no key"}},
    ]  # fmt: skip
    got = purchase_of("pi_1", 1, purchase_fields(session))
    assert got.checkout_session is not None
    assert [(f.key, f.type, f.value) for f in got.checkout_session.custom_fields] == [
        ("engraving", "text", "Jane"),
        ("size", "dropdown", "l"),
        ("floor", "numeric", None),
    ]


def test_objects_of_other_kinds_give_nothing() -> None:
    assert purchase_fields({"object": "refund", "id": "re_1", "customer": "cus_1"}) == {}
    assert purchase_fields({}) == {}


ADDRESS = {
    "line1": "1 Main St",
    "line2": "Apt 2",
    "city": "Springfield",
    "state": "IL",
    "postal_code": "62701",
    "country": "US",
}
BILLING = {**ADDRESS, "line1": "9 Billing Rd", "line2": None}
SHIPPING = {"name": "Sam Shipper", "address": ADDRESS}


def shipped_session(**shape: object) -> dict:
    """A paid session of the shipping ``shape`` Stripe's API version gives it, with the phone
    and billing address the customer gave."""
    session = obj("checkout.session.completed")
    session.pop("shipping")
    session.update(shape)
    session["customer_details"].update(phone="+15555550100", address=BILLING)
    return session


@pytest.mark.parametrize(
    "shape",
    [
        {"shipping": SHIPPING},  # before API 2022-08-01
        {"shipping_details": SHIPPING},  # 2022-08-01 until 2025-03-31.basil
        {"collected_information": {"shipping_details": SHIPPING}},  # 2025-02-24.acacia on
        {"shipping_details": None, "collected_information": {"shipping_details": SHIPPING}},
    ],
    ids=["shipping", "shipping_details", "collected_information", "both"],
)
def test_a_session_gives_where_to_ship_in_each_api_shape(shape: dict) -> None:
    got = purchase_of("pi_1", 1, purchase_fields(shipped_session(**shape))).to_dict()
    assert got["shipping"] == {"name": "Sam Shipper", "phone": "+15555550100", "address": ADDRESS}
    details = got["checkout_session"]["customer_details"]
    assert (details["phone"], details["address"]) == ("+15555550100", BILLING)


def test_a_session_s_collected_information_wins_over_its_legacy_field() -> None:
    """API 2025-02-24.acacia sends both; the shipping an update_shipping_details changed is in
    collected_information."""
    moved = {"name": "Sam Shipper", "address": {**ADDRESS, "line1": "2 New St"}}
    session = shipped_session(
        shipping_details=SHIPPING, collected_information={"shipping_details": moved}
    )
    got = purchase_of("pi_1", 1, purchase_fields(session))
    assert got.shipping is not None and got.shipping.address is not None
    assert got.shipping.address.line1 == "2 New St"


def test_a_card_payment_outside_checkout_gives_its_payment_intent_s_shipping() -> None:
    pi = obj("payment_intent.succeeded")  # as Stripe sent it (API 2020-08-27): shipping set
    pi["shipping"].update(phone="+15555550199", carrier="UPS", tracking_number="1Z999")
    got = purchase_of(pi["id"], 1, purchase_fields(pi)).to_dict()
    assert got["shipping"] == {
        "name": "Jenny Rosen",
        "phone": "+15555550199",
        "address": {
            "line1": "510 Townsend St",
            "line2": None,
            "city": "San Francisco",
            "state": "CA",
            "postal_code": "94103",
            "country": "US",
        },
    }
    assert got["checkout_session"] is None


def test_a_charge_that_comes_first_gives_its_copy_of_the_shipping() -> None:
    charge = obj("charge.succeeded")
    charge.update(id="ch_1", payment_intent="pi_1")
    got = purchase_of("pi_1", 1, purchase_fields(charge))
    assert got.shipping is not None and got.shipping.name == "Jenny Rosen"


def test_the_session_s_shipping_wins_over_the_payment_intent_s() -> None:
    pi = obj("payment_intent.succeeded")
    fields = {**purchase_fields(pi), **purchase_fields(shipped_session(shipping=SHIPPING))}
    got = purchase_of(pi["id"], 1, fields)
    assert got.shipping is not None and got.shipping.name == "Sam Shipper"


def test_no_shipping_and_no_card_details() -> None:
    """A session that collected none, empty shapes, and a charge's billing details (the card's
    address: never read) give no shipping."""
    session = obj("checkout.session.completed")
    session.update(shipping_details={"name": None, "address": None})
    session["collected_information"] = {"shipping_details": None}
    charge = obj("charge.succeeded")
    charge.update(id="ch_1", payment_intent="pi_1", shipping=None)
    charge["billing_details"] = {"address": BILLING, "phone": "+15555550100", "name": "Card"}
    fields = {**purchase_fields(session), **purchase_fields(charge)}
    got = purchase_of("pi_1", 1, fields)
    assert got.shipping is None
    assert got.checkout_session is not None
    assert (
        got.checkout_session.customer_details.phone,
        got.checkout_session.customer_details.address,
    ) == (None, None)
    assert "Billing" not in json.dumps(fields) and "+1555" not in json.dumps(fields)


def test_metadata_as_large_as_stripe_allows_is_kept_whole() -> None:
    """50 keys of 40 characters, values of 500 (Stripe's limits): before, any map over 4,096
    characters was dropped whole, `order_id` with it, and looked like no metadata."""
    md = {"order_id": "ord_42", **{f"note{i:02}".ljust(40, "x"): "v" * 500 for i in range(49)}}
    session = {"object": "checkout.session", "id": "cs_1", "metadata": md}
    assert json.loads(purchase_fields(session)["p_md_cs"]) == md
    wide = {"order_id": "ord_42", **{f"n{i:02}": "注文" * 250 for i in range(49)}}  # 3 bytes each
    session["metadata"] = wide
    assert json.loads(purchase_fields(session)["p_md_cs"]) == wide


def test_metadata_past_the_cap_keeps_the_pairs_that_fit_in_key_order() -> None:
    """Only text that JSON escapes heavily gets there: whole pairs kept, never none."""
    md = {"a_order_id": "ord_42", **{f"n{i:02}": "\x01" * 500 for i in range(49)}}
    kept = json.loads(purchase_fields({"object": "checkout.session", "metadata": md})["p_md_cs"])
    assert kept["a_order_id"] == "ord_42" and 0 < len(kept) < len(md)
    assert list(kept) == sorted(md)[: len(kept)] and all(kept[k] == md[k] for k in kept)
    assert len(orjson.dumps(kept)) <= MAX_VALUE


def test_an_invoice_s_lines_are_kept_and_past_the_cap_the_leading_ones() -> None:
    def invoice(n: int) -> dict:
        lines = [
            {"id": f"il_{i}", "description": "1 × Seat (at $10.00 / month)" + " " * 150,
             "amount": 1000, "currency": "usd", "quantity": 1, "price": {"id": "price_1"}}
            for i in range(n)
        ]  # fmt: skip
        return {"object": "invoice", "id": "in_1", "lines": {"data": lines}}

    twenty = json.loads(purchase_fields(invoice(20))["p_in_lines"])
    assert [line["id"] for line in twenty] == [f"il_{i}" for i in range(20)]
    many = json.loads(purchase_fields(invoice(1000))["p_in_lines"])
    assert 20 < len(many) < 1000 and many[-1]["id"] == f"il_{len(many) - 1}"


def test_a_metadata_value_that_is_a_map_or_list_is_left_out() -> None:
    """Stripe's metadata values are strings; a nested one (only a holder of the webhook secret
    can send it, up to 1,024 levels deep, past what ``str()`` recurses) is not kept."""
    deep: object = "x"
    for _ in range(1100):
        deep = {"a": deep}
    md = {"order": "7", "deep": deep, "list": [1, 2], "n": 3}
    got = purchase_fields({"object": "payment_intent", "id": "pi_1", "metadata": md})
    assert json.loads(got["p_md_pi"]) == {"order": "7", "n": "3"}
    line = invoice_line({"id": "il_1", "metadata": md})
    assert line["metadata"] == {"order": "7", "n": "3"}
