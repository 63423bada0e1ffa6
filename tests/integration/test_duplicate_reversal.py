"""A possible duplicate purchase (FULFIL_UNLINKED_INVOICES: an invoice paid without its
PaymentIntent, then the PaymentIntent, before the Checkout session that ties them) that a
person closes as fulfilled, then refunded in full, through the real ledger, the real job in
this process, examples/shop's grant.sql and revoke.sql and a real PostgreSQL. The purchase's
effect was applied under the invoice's record; the refund names the PaymentIntent."""

import random

import pytest

from examples.shop import migrate
from ledger import keys
from ledger.decisions import decide
from tests.integration.test_shop_reversal import entitlement, reversal_keys
from tests.support.helpers import purchase, settled_as, state_of
from tests.support.postgres import shop_actions
from tests.support.refunds import refund_events


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied-late"])
def test_a_closed_duplicate_refunded_is_never_reversed_under_its_own_key(
    fulfilment, redis, postgres_url, rng: random.Random, tied: bool
) -> None:
    """The invoice's record is fulfilled (its entitlement under its key), the PaymentIntent's
    held as its possible duplicate (with ``tied``, Stripe's session ties them late), and a
    person closes the PaymentIntent's as fulfilled: no call, no effect of its own. Its refund
    in full is then a refund of the purchase whose effect is the invoice's. The ledger must
    not reverse it under ``reverse:{pi}`` (revoke.sql finds nothing under that key, and the
    payment would read ``reversed`` while the entitlement stands): it is held for a person,
    who takes the invoice's effect back by hand and resolves it, then reversed."""
    migrate(postgres_url)
    f = fulfilment(
        **shop_actions(postgres_url),
        FULFIL_UNLINKED_INVOICES="true",
        FULFILMENT_TIMEOUT="3",
        LEASE_SECONDS="6",
    )
    session, invoice, intent = purchase(rng)
    in_key = invoice["data"]["object"]["id"]
    pi = intent["data"]["object"]["id"]
    f.deliver(invoice)
    f.work()
    assert settled_as(redis, in_key, "fulfilled") and entitlement(postgres_url, in_key)[1] is False
    f.deliver(intent)
    assert state_of(redis, pi) == "held"
    reason = redis.hget(keys.payment(pi), "hold_reason").decode()
    assert reason.startswith(f"possible duplicate purchase of {in_key}")
    if tied:
        f.deliver(session)
        assert redis.hget(keys.payment(pi), "same_purchase_as") == in_key.encode()
    assert decide(f.attempts, pi, "resolve", "fulfilled", "person").state == "fulfilled"

    for event in refund_events(rng, pi, 2000, 2000) * 2:
        f.deliver(event)
    f.work()
    f.sweep()
    f.work()
    # never a reversal of nothing reported as done, never one of the invoice's effect twice
    assert reversal_keys(postgres_url, pi) == [] and reversal_keys(postgres_url, in_key) == []
    assert entitlement(postgres_url, in_key) == (0, False)  # a person's, not the ledger's
    assert settled_as(redis, in_key, "fulfilled")
    assert state_of(redis, pi) == "held"
    reason = redis.hget(keys.payment(pi), "hold_reason").decode()
    assert in_key in reason and "by hand" in reason, reason

    assert decide(f.attempts, pi, "resolve", "retry", "person").error == "grant_by_hand"
    assert decide(f.attempts, pi, "resolve", "fulfilled", "person").state == "reversed"
    f.sweep()
    f.work()
    assert reversal_keys(postgres_url, pi) == [] and settled_as(redis, pi, "reversed")
