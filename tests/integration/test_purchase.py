"""The purchase every action receives, built from what the ledger recorded of a payment's
events (never from Stripe): the same whatever order Stripe sends them in, still whole once
the events themselves expire, and stored by the built-in SQLite downstream."""

import itertools
import json
import sqlite3

import pytest
from redis import Redis
from redis.exceptions import ResponseError

from examples.actions import grant_access
from ledger import keys
from ledger.downstream import open_downstream
from ledger.purchase import read_purchase
from ledgerctl import samples
from tests.support.helpers import payment_key_of, settled_as
from tests.support.inprocess import Fulfilment
from tests.support.processes import wait_until
from tests.support.purchases import EMAIL, NAME, ORDER, checkout_purchase, purchase_validator
from tests.support.refunds import refund_events


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))), ids=str)
def test_a_checkout_purchase_in_any_order(fulfilment, redis: Redis, rng, order) -> None:
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    for i in order:
        f.deliver(events[i])
    pk = payment_key_of(events[2])
    got = read_purchase(redis, pk, 1).to_dict()
    session = events[3]["data"]["object"]
    assert purchase_validator().is_valid(got)
    assert got["checkout_session_id"] == session["id"]
    assert (got["client_reference_id"], got["customer_email"], got["customer_name"]) == (
        ORDER,
        EMAIL,
        NAME,
    )
    assert got["checkout_session"]["customer_details"] == {
        "email": EMAIL,
        "name": NAME,
        "phone": None,
        "address": None,
    }
    assert (got["checkout_session"]["mode"], got["checkout_session"]["payment_status"]) == (
        "payment",
        "paid",
    )
    assert got["metadata"] == {
        "payment_intent": {"source": "payment_intent"},
        "checkout_session": {"order": ORDER, "source": "session"},
        "invoice": None,
    }
    assert got["charge"] == events[1]["data"]["object"]["id"]
    assert got["customer"] == session["customer"]
    assert (got["payment_intent"], got["amount"], got["currency"]) == (
        pk,
        0 or got["amount"],
        "usd",
    )
    assert got["amount"] == events[2]["data"]["object"]["amount_received"]
    first_paid = next(events[i] for i in order if i in (1, 2, 3))
    assert got["paid_by"] == {"event_id": first_paid["id"], "type": first_paid["type"]}
    assert sorted(got["event_ids"]) == sorted(e["id"] for e in events)
    assert got["line_items"] is None and got["invoice"] is None
    assert got["refunded_amount"] == 0


def test_the_purchase_outlives_its_events(fulfilment, redis: Redis, rng) -> None:
    """EVENT_RETENTION_DAYS may expire the events while the payment is kept (a person's
    retry weeks later): the purchase is the same without them."""
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    for event in events:
        f.deliver(event)
    pk = payment_key_of(events[2])
    before = read_purchase(redis, pk, 1)
    redis.delete(*(keys.event(e["id"]) for e in events))
    assert read_purchase(redis, pk, 1) == before


def test_a_late_unpaid_copy_of_the_session_does_not_undo_the_paid_one(
    fulfilment, redis: Redis, rng
) -> None:
    """An asynchronous payment: checkout.session.completed says ``unpaid``, then
    async_payment_succeeded says ``paid``; Stripe may send them the other way round."""
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    paid = json.loads(json.dumps(events[3]))
    paid["type"], paid["id"] = "checkout.session.async_payment_succeeded", "evt_async_paid_1"
    unpaid = events[3]
    unpaid["data"]["object"]["payment_status"] = "unpaid"
    f.deliver(paid)
    f.deliver(unpaid)
    got = read_purchase(redis, payment_key_of(events[2]), 1)
    assert got.checkout_session is not None
    assert got.checkout_session.payment_status == "paid"


def test_a_session_completed_unpaid_then_paid_by_its_payment_intent_says_paid(
    fulfilment, redis: Redis, rng
) -> None:
    """An asynchronous payment whose PaymentIntent's success is recorded before the session's
    async_payment_succeeded (or without it): the purchase the action receives is of a paid
    payment, never ``unpaid``, the status Stripe's guide says not to fulfil. Before it was
    paid, the session's own status."""
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    unpaid = events[3]
    unpaid["data"]["object"]["payment_status"] = "unpaid"
    pk = payment_key_of(events[2])
    f.deliver(unpaid)
    before = read_purchase(redis, pk, 1).checkout_session
    assert before is not None and before.payment_status == "unpaid"
    f.deliver(events[2])
    got = read_purchase(redis, pk, 1)
    assert got.checkout_session is not None
    assert got.checkout_session.payment_status == "paid"
    assert got.paid_by.type == "payment_intent.succeeded"


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 0, 2), (0, 3)], ids=str)
def test_a_subscription_s_purchase_names_its_payment_intent(
    fulfilment, redis: Redis, rng, order
) -> None:
    """A subscription-mode session has no PaymentIntent: a payment its session began is keyed
    by the session, and its invoice's PaymentIntent, learnt later (from the invoice, the
    PaymentIntent or its charge, which pays it alone), is the purchase's too."""
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    pi = events[2]["data"]["object"]["id"]
    session = events[3]
    obj = session["data"]["object"]
    obj.update(mode="subscription", payment_intent=None, invoice="in_sub_1", subscription="sub_1")
    invoice = samples.event_of_type(rng, "invoice.paid")
    invoice["data"]["object"].update(
        id="in_sub_1",
        payment_intent=pi,
        subscription="sub_1",
        customer=obj["customer"],
        amount_paid=obj["amount_total"],
        currency="usd",
    )
    events[2]["data"]["object"]["invoice"] = "in_sub_1"
    events[1]["data"]["object"]["invoice"] = "in_sub_1"
    sent = (session, invoice, events[2], events[1])
    (pk,) = {f.deliver(sent[i]).payment_key for i in order}
    got = read_purchase(redis, pk, 1).to_dict()
    assert purchase_validator().is_valid(got)
    assert (got["payment_intent"], got["invoice_id"], got["subscription"]) == (
        pi,
        "in_sub_1",
        "sub_1",
    )
    assert got["checkout_session_id"] == obj["id"]


def test_a_free_checkout_s_purchase_cost_nothing_and_the_example_grants_it(
    fulfilment, redis: Redis, rng, tmp_path, monkeypatch
) -> None:
    """A session a coupon made free: the purchase says amount 0, not null (unknown), and the
    shipped example action grants it rather than giving it up."""
    f: Fulfilment = fulfilment()
    session = checkout_purchase(rng)[3]
    free = {"payment_status": "no_payment_required", "amount_total": 0, "payment_intent": None}
    session["data"]["object"].update(free)
    pk = f.deliver(session).payment_key
    got = read_purchase(redis, pk, 1)
    assert (got.payment_key, got.amount, got.currency) == (
        session["data"]["object"]["id"],
        0,
        "usd",
    )
    monkeypatch.setenv("SHOP_DB", str(tmp_path / "shop.sqlite3"))
    assert grant_access(got.to_dict()) == {"granted": True, "payment": pk}  # type: ignore[arg-type]


def test_the_ledger_refuses_other_fields_than_the_purchase_s(fulfilment, redis, rng) -> None:
    f: Fulfilment = fulfilment()
    event = checkout_purchase(rng)[2]
    from ledger.deliveries import Delivery, new_request_id
    from ledger.events import classify
    from ledgerctl import samples

    d = Delivery(
        event,
        samples.encode(event),
        classify(event, f.settings.policy),
        "t",
        "stripe",
        new_request_id(),
    )
    named_keys, args = f.ledger.delivery_call(d, "")
    with pytest.raises(ResponseError, match="purchase must map p_"):
        f.ledger.record_script(named_keys, {**args, "purchase": '{"state": "fulfilled"}'})
    assert not redis.exists(keys.payment(payment_key_of(event)))


def test_the_built_in_downstream_stores_the_purchase(fulfilment, redis, rng, config) -> None:
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    for event in events:
        f.deliver(event)
    pk = payment_key_of(events[2])
    wait_until(lambda: (f.work(), f.sweep(), settled_as(redis, pk, "fulfilled"))[2])
    path = str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///")
    db = open_downstream(path)
    row = db.execute(
        "SELECT client_reference_id, customer, purchase FROM orders WHERE payment_key = ?", (pk,)
    ).fetchone()
    assert row[:2] == (ORDER, events[3]["data"]["object"]["customer"])
    assert json.loads(row[2]) == read_purchase(redis, pk, 1).to_dict()


def test_a_partial_refund_before_the_call_is_in_the_purchase(
    fulfilment, redis, rng, config
) -> None:
    """A refund of part of the payment recorded before its fulfilment takes nothing back by
    itself (no REVERSAL_PER_REFUND): the action is told, so it can grant what was kept."""
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    pk = payment_key_of(events[2])
    paid = events[2]["data"]["object"]["amount_received"]
    for event in [*events, *refund_events(rng, pk, paid, 300)]:
        f.deliver(event)
    wait_until(lambda: (f.work(), f.sweep(), settled_as(redis, pk, "fulfilled"))[2])
    path = str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///")
    query = "SELECT purchase FROM orders WHERE payment_key = ?"
    row = open_downstream(path).execute(query, (pk,)).fetchone()
    sent = json.loads(row[0])
    assert (sent["amount"], sent["refunded_amount"]) == (paid, 300)
    assert purchase_validator().is_valid(sent)


def test_an_older_downstream_file_gains_the_purchase_columns(tmp_path) -> None:
    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE orders (idempotency_key TEXT PRIMARY KEY, payment_key TEXT NOT NULL,"
        " amount INTEGER, currency TEXT, token INTEGER NOT NULL, at REAL NOT NULL);"
        "INSERT INTO orders VALUES ('fulfil:pi_old', 'pi_old', 100, 'usd', 1, 0);"
    )
    old.close()
    db = open_downstream(path)
    columns = [r[1] for r in db.execute("PRAGMA table_info(orders)")]
    added = ["client_reference_id", "customer", "purchase", "reversed_at", "reversed_amount"]
    assert columns[-5:] == added
    assert db.execute("SELECT payment_key, purchase FROM orders").fetchall() == [("pi_old", None)]
    db.close()
    open_downstream(path).close()  # a second opening finds nothing to add


def test_a_payment_recorded_before_the_purchase_fields_gets_them_from_its_events(
    fulfilment, redis: Redis, rng
) -> None:
    """An upgrade: a payment queued before the ledger kept p_* fields."""
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    for event in events:
        f.deliver(event)
    pk = payment_key_of(events[2])
    kept = read_purchase(redis, pk, 1)
    redis.hdel(keys.payment(pk), *[k for k in redis.hkeys(keys.payment(pk)) if k[:2] == b"p_"])
    assert read_purchase(redis, pk, 1) == kept


def test_a_charge_first_gives_its_copy_of_the_payment_intent_s_metadata_and_email(
    fulfilment, redis: Redis, rng
) -> None:
    """Stripe copies a PaymentIntent's metadata and receipt_email onto its charge when it is
    confirmed, and charge.succeeded often comes first: the purchase an attempt gets then
    has them; the PaymentIntent's own event, once there, wins (its metadata may be newer)."""
    f: Fulfilment = fulfilment()
    events = samples.payment_events(rng)
    charge, intent = events[1], events[2]
    charge["data"]["object"].update(metadata={"order": "4711"}, receipt_email=EMAIL)
    f.deliver(charge)
    pk = payment_key_of(intent)
    got = read_purchase(redis, pk, 1).to_dict()
    assert (got["metadata"]["payment_intent"], got["customer_email"]) == ({"order": "4711"}, EMAIL)
    assert purchase_validator().is_valid(got)
    intent["data"]["object"].update(metadata={"order": "4711", "note": "gift"}, receipt_email=None)
    f.deliver(intent)
    got = read_purchase(redis, pk, 1).to_dict()
    assert got["metadata"]["payment_intent"] == {"order": "4711", "note": "gift"}
    assert got["customer_email"] == EMAIL  # the PaymentIntent's event carried none


def test_a_charge_of_no_payment_intent_gives_no_payment_intent_metadata(
    fulfilment, redis: Redis, rng
) -> None:
    """A charge made without a PaymentIntent (the Charges API): its metadata is its own."""
    f: Fulfilment = fulfilment()
    charge = samples.payment_events(rng)[1]
    obj = charge["data"]["object"]
    obj.update(metadata={"order": "1"}, receipt_email=EMAIL, payment_intent=None)
    f.deliver(charge)
    got = read_purchase(redis, obj["id"], 1).to_dict()
    assert got["metadata"]["payment_intent"] is None and got["customer_email"] is None


SHIP_TO = {
    "line1": "1 Main St",
    "line2": None,
    "city": "Springfield",
    "state": "IL",
    "postal_code": "62701",
    "country": "US",
}


def shipped_checkout_purchase(rng) -> list[dict]:
    """A Checkout purchase that collected a shipping address and a phone (API basil's
    shape), which Checkout also set on the PaymentIntent as its ``shipping``."""
    events = checkout_purchase(rng)
    session = events[3]["data"]["object"]
    session.pop("shipping")
    session["collected_information"] = {
        "shipping_details": {"name": "Sam Shipper", "address": SHIP_TO}
    }
    session["customer_details"].update(phone="+15555550100", address={**SHIP_TO, "line1": "B"})
    for intent in (events[0], events[2]):
        intent["data"]["object"]["shipping"] = {
            "name": "Sam Shipper",
            "phone": "+15555550100",
            "address": SHIP_TO,
            "carrier": None,
            "tracking_number": None,
        }
    return events


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0), (1, 3, 0, 2), (2, 0, 3, 1)], ids=str)
def test_a_checkout_purchase_ships_to_one_address_in_any_order(
    fulfilment, redis: Redis, rng, order
) -> None:
    f: Fulfilment = fulfilment()
    events = shipped_checkout_purchase(rng)
    for i in order:
        f.deliver(events[i])
    got = read_purchase(redis, payment_key_of(events[2]), 1).to_dict()
    assert purchase_validator().is_valid(got)
    assert got["shipping"] == {"name": "Sam Shipper", "phone": "+15555550100", "address": SHIP_TO}
    details = got["checkout_session"]["customer_details"]
    assert (details["phone"], details["address"]) == ("+15555550100", {**SHIP_TO, "line1": "B"})


@pytest.mark.parametrize("paying_first", [False, True], ids=["created_first", "succeeded_first"])
def test_the_paying_event_s_shipping_wins(fulfilment, redis: Redis, rng, paying_first) -> None:
    """A card payment outside Checkout whose shipping changed before it was paid:
    payment_intent.created carries the old address, payment_intent.succeeded the one paid
    for, whichever Stripe delivers first."""
    f: Fulfilment = fulfilment()
    events = samples.payment_events(rng)
    created, succeeded = events[0], events[2]
    created["data"]["object"]["shipping"]["address"]["line1"] = "Old Rd 1"
    sent = (succeeded, created) if paying_first else (created, succeeded)
    for event in sent:
        f.deliver(event)
    got = read_purchase(redis, payment_key_of(succeeded), 1)
    assert got.shipping is not None and got.shipping.address is not None
    assert got.shipping.address.line1 == "510 Townsend St"
    assert purchase_validator().is_valid(got.to_dict())


def test_a_session_paid_later_ships_where_its_paying_event_says(
    fulfilment, redis: Redis, rng
) -> None:
    """An asynchronous payment: the session completed unpaid, and its
    async_payment_succeeded (the paying event) carries the address the customer changed."""
    f: Fulfilment = fulfilment()
    events = shipped_checkout_purchase(rng)
    unpaid = events[3]
    unpaid["data"]["object"]["payment_status"] = "unpaid"
    paid = json.loads(json.dumps(unpaid))
    paid["type"], paid["id"] = "checkout.session.async_payment_succeeded", "evt_async_paid_2"
    paid["data"]["object"]["payment_status"] = "paid"
    shipping = paid["data"]["object"]["collected_information"]["shipping_details"]
    shipping["address"] = {**SHIP_TO, "line1": "2 New St"}
    f.deliver(unpaid)
    f.deliver(paid)
    got = read_purchase(redis, payment_key_of(events[2]), 1)
    assert got.shipping is not None and got.shipping.address is not None
    assert got.shipping.address.line1 == "2 New St"
