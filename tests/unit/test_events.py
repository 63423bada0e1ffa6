"""The one table: which payment an event belongs to, whether it means paid, and when a paid
event must wait for a person. Payloads are the shipped real test-mode samples, changed only
where a case needs it (the basil invoice, the manual-capture charge, a setup session...)."""

import json
from pathlib import Path

import pytest

from ledger.events import Policy, classify
from ledger.money import paid_amount
from ledger.settings import Settings
from ledgerctl import samples

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stripe"
PI = "pi_000000000000000000000000"
IN = "in_000000000000000000000000"
TEST = Policy(frozenset(Settings.PAID_EVENT_TYPES), mode="test")
LIVE = Policy(frozenset(Settings.PAID_EVENT_TYPES), mode="live")
UNLINKED = Policy(frozenset(Settings.PAID_EVENT_TYPES), unlinked_invoices=True, mode="test")


def sample(event_type: str, as_type: str | None = None, **changes: object) -> dict:
    event = json.loads(samples.template(event_type))
    event["type"] = as_type or event_type
    event["data"]["object"].update(changes)
    return event


BASIL_INVOICE = {"payment_intent": None}
EXPANDED_INVOICE = {
    "payment_intent": None,
    "payments": {"data": [{"payment": {"type": "payment_intent", "payment_intent": PI}}]},
}
MANUAL_CAPTURE = {"captured": False, "amount_captured": 0, "paid": True, "status": "succeeded"}


@pytest.mark.parametrize(
    ("event_type", "as_type", "changes", "key", "role", "paid"),
    [
        ("payment_intent.created", None, {}, PI, "info", False),
        ("payment_intent.succeeded", None, {}, PI, "paid", True),
        ("payment_intent.payment_failed", None, {}, PI, "failed", False),
        # An authorisation is not a payment.
        (
            "payment_intent.succeeded",
            "payment_intent.amount_capturable_updated",
            {},
            PI,
            "info",
            False,
        ),
        ("charge.succeeded", None, {}, PI, "paid", True),
        ("charge.succeeded", None, {"paid": False}, PI, "info", False),
        ("charge.succeeded", None, MANUAL_CAPTURE, PI, "info", False),
        ("charge.succeeded", "charge.captured", {}, PI, "paid", True),
        ("charge.succeeded", "charge.captured", MANUAL_CAPTURE, PI, "info", False),
        ("charge.failed", None, {}, PI, "failed", False),
        ("charge.refunded", None, {}, None, "refund", False),
        ("checkout.session.completed", None, {}, PI, "paid", True),
        ("checkout.session.completed", None, {"payment_status": "unpaid"}, PI, "info", False),
        ("checkout.session.completed", None, {"mode": "subscription"}, PI, "info", False),
        (
            "checkout.session.completed",
            None,
            {"mode": "setup", "payment_intent": None, "payment_status": "no_payment_required"},
            "cs_test_000000000000000000000000000000000000000000000000000000000000",
            "info",
            False,
        ),
        ("invoice.paid", None, {}, PI, "paid", True),
        ("invoice.paid", None, BASIL_INVOICE, IN, "info", False),
        ("invoice.paid", None, EXPANDED_INVOICE, PI, "paid", True),
    ],
)
def test_mapping(
    event_type: str, as_type: str | None, changes: dict, key: str | None, role: str, paid: bool
) -> None:
    event = sample(event_type, as_type, **changes)
    if key and key.startswith("cs_"):
        key = event["data"]["object"]["id"]
    c = classify(event, TEST)
    assert (c.payment_key, c.role, c.paid) == (key, role, paid)


def test_unlinked_invoices_only_when_configured() -> None:
    event = sample("invoice.paid", **BASIL_INVOICE)
    c = classify(event, UNLINKED)
    assert c.paid and c.payment_key == IN
    assert c.fingerprint.startswith("invoice|test:cus_"), "kept to catch a duplicate purchase"


def test_a_checkout_session_ties_its_payment_intent_invoice_and_own_id() -> None:
    """The session's own id too: the landing page asks by it (ledger/landing.py)."""
    session = sample("checkout.session.completed", invoice=IN)
    c = classify(session, UNLINKED)
    assert c.payment_key == PI and c.linked == (IN, session["data"]["object"]["id"])


@pytest.mark.parametrize(
    ("policy", "livemode", "account", "held"),
    [
        (LIVE, False, None, "test-mode event in a live deployment"),
        (LIVE, True, None, ""),
        (TEST, True, None, "live-mode event in a test deployment"),
        (Policy(frozenset(Settings.PAID_EVENT_TYPES), mode="any"), False, None, ""),
        (TEST, False, "acct_1", "Connect event of account acct_1"),
        (
            Policy(frozenset(Settings.PAID_EVENT_TYPES), mode="test", connect=True),
            False,
            "acct_1",
            "",
        ),
    ],
)
def test_mode_and_connect_holds(
    policy: Policy, livemode: bool, account: str | None, held: str
) -> None:
    event = sample("payment_intent.succeeded")
    event["livemode"] = livemode
    if account:
        event["account"] = account
    c = classify(event, policy)
    assert c.paid and c.hold.startswith(held) and bool(c.hold) == bool(held)
    assert c.account == (account or "")


def test_paid_types_are_configurable_and_unknown_types_ignored() -> None:
    only_pi = Policy(frozenset({"payment_intent.succeeded"}), mode="test")
    assert not classify(sample("charge.succeeded"), only_pi).paid
    other = {"id": "evt_1", "type": "customer.updated", "data": {"object": {"id": "cus_1"}}}
    assert classify(other, TEST).payment_key is None


def thin(event_type: str, related_type: str, related_id: str) -> dict:
    ref = {"id": related_id, "type": related_type, "url": f"/v1/x/{related_id}"}
    return {
        "id": "evt_test_1",
        "object": "v2.core.event",
        "type": event_type,
        "related_object": ref,
    }


@pytest.mark.parametrize(
    ("event_type", "related_type", "related_id", "key", "role", "paid"),
    [
        ("v1.payment_intent.succeeded", "payment_intent", PI, PI, "info", False),
        ("v1.payment_intent.payment_failed", "payment_intent", PI, PI, "failed", False),
        ("v1.payment_intent.canceled", "payment_intent", PI, PI, "failed", False),
        ("v1.payment_intent.created", "payment_intent", PI, PI, "info", False),
        ("v1.payment_intent.succeeded", "charge", "ch_1", None, "info", False),
        ("v1.charge.succeeded", "charge", "ch_1", None, "info", False),
        ("v1.invoice.paid", "invoice", IN, None, "info", False),
    ],
)
def test_thin_mapping(
    event_type: str, related_type: str, related_id: str, key: str | None, role: str, paid: bool
) -> None:
    c = classify(thin(event_type, related_type, related_id), TEST)
    assert (c.payment_key, c.role, c.paid) == (key, role, paid)


def test_a_thin_payment_intent_pays_only_when_paid_types_list_it() -> None:
    listed = Policy(
        frozenset({*Settings.PAID_EVENT_TYPES, "v1.payment_intent.succeeded"}), mode="test"
    )
    c = classify(thin("v1.payment_intent.succeeded", "payment_intent", PI), listed)
    assert (c.payment_key, c.role, c.paid, c.hold) == (PI, "paid", True, "")
    c = classify(thin("v1.payment_intent.succeeded", "payment_intent", PI), LIVE)
    assert not c.paid, "not listed in the default PAID_EVENT_TYPES"


def test_a_free_checkout_is_paid_for_nothing_and_has_no_twin_to_find() -> None:
    """A session a coupon made free (``no_payment_required``, ``amount_total`` 0, no
    PaymentIntent): paid, its amount 0 (what it cost, not unknown), and no fingerprint, as
    before: nothing was charged, so no charge of the same purchase can come to tie to it."""
    free = {"payment_status": "no_payment_required", "amount_total": 0, "payment_intent": None}
    event = sample("checkout.session.completed", **free)
    c = classify(event, TEST)
    assert (c.role, c.paid, c.fingerprint) == ("paid", True, "")
    assert paid_amount(event["data"]["object"]) == 0


def test_an_invoice_that_cost_nothing_fulfils_under_its_own_id() -> None:
    """A trial's or a 100 % coupon's invoice (Stripe's own payload: ``amount_paid`` and
    ``amount_due`` 0, no PaymentIntent) is paid and no PaymentIntent will ever come to
    fulfil the same purchase twice: it fulfils under the invoice id without
    FULFIL_UNLINKED_INVOICES. Before, a free trial started through Checkout never did."""
    event = json.loads((FIXTURES / "invoice.paid.subscription_cycle.json").read_text())
    c = classify(event, TEST)
    assert (c.payment_key, c.role, c.paid) == (event["data"]["object"]["id"], "paid", True)
    charged = json.loads(json.dumps(event))
    charged["data"]["object"].update(amount_paid=900, amount_due=900)
    assert (classify(charged, TEST).role, classify(charged, TEST).paid) == ("info", False)


def invoice_payment(**changes: object) -> dict:
    """``invoice_payment.paid`` (API basil and later), tests/fixtures/stripe's payload."""
    event = json.loads((FIXTURES / "invoice_payment.paid.json").read_text())
    event["data"]["object"].update(changes)
    return event


@pytest.mark.parametrize("policy", [TEST, UNLINKED], ids=["default", "unlinked"])
def test_an_invoice_payment_ties_its_invoice_to_its_payment_intent(policy: Policy) -> None:
    """Since API basil the one event naming both: never paid itself (the PaymentIntent's and
    the invoice's own paid events pay), it joins the invoice to the PaymentIntent's payment."""
    c = classify(invoice_payment(), policy)
    assert (c.payment_key, c.role, c.paid, c.linked, c.fingerprint) == (
        PI,
        "info",
        False,
        (IN,),
        "",
    )


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        # open or canceled: its PaymentIntent may never pay the invoice, so no tie
        ({"status": "open"}, None),
        ({"status": "canceled"}, None),
        # a charge without a PaymentIntent, or a payment record: the invoice's own record
        ({"payment": {"type": "charge", "charge": "ch_1"}}, IN),
        ({"payment": {"type": "payment_record", "payment_record": "pr_1"}}, IN),
    ],
)
def test_an_invoice_payment_ties_only_a_paid_payment_intent(changes: dict, key: str | None) -> None:
    c = classify(invoice_payment(**changes), UNLINKED)
    assert (c.payment_key, c.role, c.paid) == (key, "info", False)
