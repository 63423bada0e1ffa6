"""A subscription's renewal since API 2025-03-31.basil: the invoice names no PaymentIntent
and the PaymentIntent no invoice; ``invoice_payment.paid`` ties them. In any arrival order,
and whether the call comes before the tie or after, the merchant's action is called once,
and its purchase names the invoice and the subscription it renews when they came before it
(with FULFIL_UNLINKED_INVOICES too, where the invoice itself pays)."""

import itertools
import json

import pytest
from redis import Redis

from ledger.downstream import open_downstream
from ledger.read import payments
from tests.support.helpers import basil_renewal
from tests.support.inprocess import Fulfilment
from tests.support.processes import wait_until

INVOICE, INTENT, CHARGE, TIE = range(4)
BUSY = ("queued", "in_progress", "retrying")


def settled(f: Fulfilment, redis: Redis) -> bool:
    f.work()
    f.sweep()
    return not any(payments.payments(redis, state) for state in BUSY)


def calls(config: dict[str, object]) -> list[tuple[str, dict]]:
    db = open_downstream(str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))
    rows = db.execute("SELECT payment_key, purchase FROM orders").fetchall()
    return [(key, json.loads(purchase)) for key, purchase in rows]


@pytest.mark.parametrize("unlinked", [False, True], ids=["default", "unlinked"])
@pytest.mark.parametrize("call_at_once", [False, True], ids=["all-then-call", "call-at-once"])
@pytest.mark.parametrize("order", list(itertools.permutations(range(4))), ids=str)
def test_a_basil_renewal_is_one_call_naming_its_invoice_and_subscription(
    fulfilment, redis: Redis, rng, config, order, call_at_once, unlinked
) -> None:
    f: Fulfilment = fulfilment(FULFIL_UNLINKED_INVOICES=str(unlinked).lower())
    events = basil_renewal(rng)
    pi = events[INTENT]["data"]["object"]["id"]
    invoice = events[INVOICE]["data"]["object"]
    for i in order:
        f.deliver(events[i])
        if call_at_once:  # a worker takes each job as soon as it is queued
            wait_until(lambda: settled(f, redis))
    wait_until(lambda: settled(f, redis))
    (called,) = calls(config)  # one call, whichever record made it
    key, purchase = called
    # What the ledger knew when the call was made: all of it, or what came up to the first
    # event that paid (FULFIL_UNLINKED_INVOICES: the invoice's own paid event pays too).
    paying = (INVOICE, INTENT, CHARGE) if unlinked else (INTENT, CHARGE)
    first = min(order.index(i) for i in paying)
    # the invoice's own record pays (the PaymentIntent's is held as its possible duplicate)
    # when its paid event came first, untied
    by_invoice = unlinked and order[first] == INVOICE and TIE not in order[:first]
    before = set(order) if not call_at_once else set(order[: first + 1])
    # the tie joins the record there is: the invoice's, when no PaymentIntent's exists yet
    tie = order.index(TIE)
    joined = order.index(INVOICE) < tie < min(order.index(INTENT), order.index(CHARGE))
    assert key == (invoice["id"] if by_invoice or joined else pi), order
    if TIE in before:
        assert purchase["payment_intent"] == pi
    named = by_invoice or TIE in before
    renews = by_invoice or {TIE, INVOICE} <= before
    assert purchase["invoice_id"] == (invoice["id"] if named else None), order
    subscription = invoice["parent"]["subscription_details"]["subscription"]
    assert purchase["subscription"] == (subscription if renews else None), order
    if not call_at_once:
        assert purchase["payment_intent"] == pi
        assert purchase["invoice"]["billing_reason"] == "subscription_cycle"
    # a tie after the call: not called again, but the payment's record has them since
    shown = payments.payment(redis, key)
    assert shown is not None and shown.purchase is not None
    assert (shown.purchase.invoice_id, shown.purchase.subscription) == (invoice["id"], subscription)


@pytest.mark.parametrize("tie_first", [True, False], ids=["tie-then-invoice", "invoice-then-tie"])
def test_a_renewal_paid_before_its_tie_waits_for_it_with_checkout_wait(
    fulfilment, redis: Redis, rng, config, tie_first
) -> None:
    """CHECKOUT_WAIT_SECONDS: a PaymentIntent's payment naming no session and no invoice
    waits; the tie names its invoice and ends the wait, so the call carries both."""
    f: Fulfilment = fulfilment(CHECKOUT_WAIT_SECONDS="30")
    invoice, intent, _, tie = basil_renewal(rng)
    pi = intent["data"]["object"]["id"]
    f.deliver(intent)
    f.work()
    assert payments.payment(redis, pi).state == "retrying"  # waiting for its session
    assert calls(config) == []
    for event in (tie, invoice) if tie_first else (invoice, tie):
        f.deliver(event)
    wait_until(lambda: settled(f, redis) and payments.payment(redis, pi).state == "fulfilled")
    ((key, purchase),) = calls(config)
    subscription = invoice["data"]["object"]["parent"]["subscription_details"]["subscription"]
    assert (key, purchase["invoice_id"], purchase["subscription"]) == (
        pi,
        invoice["data"]["object"]["id"],
        subscription,
    )
