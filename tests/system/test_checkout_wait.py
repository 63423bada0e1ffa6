"""A deployment that sells through Checkout (CHECKOUT_WAIT_SECONDS): a payment whose paying
event comes before its session's waits for it (real RQ workers and sweeper), then looks the
session up by its PaymentIntent through Stripe's API (the local stand-in), and only then is
fulfilled, without a session if there is none; one call either way."""

import time

import pytest
from redis import Redis

from ledger import keys
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import payment_key_of, state_of
from tests.support.processes import wait_until
from tests.support.purchases import (
    EMAIL,
    ORDER,
    checkout_purchase,
    line_items,
    purchase_validator,
)
from tests.support.stripe_api import API_KEY, EventsApi


def settings_for(stripe_api: EventsApi, wait_s: int) -> dict[str, str]:
    return {
        "CHECKOUT_WAIT_SECONDS": str(wait_s),
        "CHECKOUT_LINE_ITEMS": "true",
        "STRIPE_API_KEY": API_KEY,
        "STRIPE_API_BASE": stripe_api.url,
    }


def waited_ms(redis: Redis, pk: str) -> int:
    """How long since the payment was paid, while it waits for its session (else 0)."""
    paid_at, waiting = redis.hmget(keys.payment(pk), "paid_at", "waiting")
    if waiting != keys.CHECKOUT_WAIT.encode() or paid_at is None:
        return 0
    return int(time.time() * 1000) - int(paid_at)


def test_the_session_event_five_seconds_late_is_in_the_one_call(
    stack, redis: Redis, rng, stripe_api
) -> None:
    events = checkout_purchase(rng)
    session = events[3]["data"]["object"]
    stripe_api.add_session(session, line_items(3, session["id"]))
    pk = payment_key_of(events[2])
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url, **settings_for(stripe_api, 60))
        s.start_web()
        s.start_worker()
        s.start_sweeper()
        for event in events[:3]:  # payment_intent.created, charge.succeeded, .succeeded
            assert s.send(samples.encode(event)).status_code == 200
        wait_until(lambda: waited_ms(redis, pk) >= 5000, what="5 s waiting for the session")
        assert not downstream.calls
        assert s.send(samples.encode(events[3])).status_code == 200
        wait_until(lambda: state_of(redis, pk) == "fulfilled", what="fulfilled")
    [body] = downstream.bodies
    assert purchase_validator().is_valid(body)
    assert body["checkout_session_id"] == session["id"]
    assert (body["client_reference_id"], body["customer_email"]) == (ORDER, EMAIL)
    assert body["metadata"]["checkout_session"] == {"order": ORDER, "source": "session"}
    assert [i["description"] for i in body["line_items"]] == [
        "Sticker #0",
        "Sticker #1",
        "Sticker #2",
    ]
    assert body["token"] == 1
    assert stripe_api.checkout_requests["/v1/checkout/sessions"] <= 1  # the start-up probe


@pytest.mark.parametrize("session_in_api", [True, False], ids=["found-by-api", "no-session"])
def test_after_the_wait_the_api_is_asked_then_the_payment_goes_on(
    stack, redis: Redis, rng, stripe_api, session_in_api: bool
) -> None:
    events = checkout_purchase(rng)
    session = events[3]["data"]["object"]
    if session_in_api:
        stripe_api.add_session(session, line_items(2, session["id"]))
    pk = payment_key_of(events[2])
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url, **settings_for(stripe_api, 2))
        s.start_web()
        s.start_worker()
        s.start_sweeper()
        for event in events[:3]:  # the session's event never comes
            assert s.send(samples.encode(event)).status_code == 200
        wait_until(lambda: state_of(redis, pk) == "fulfilled", what="fulfilled")
    [body] = downstream.bodies
    assert purchase_validator().is_valid(body)
    paid_at, fulfilled_at = map(int, redis.hmget(keys.payment(pk), "paid_at", "fulfilled_at"))
    assert fulfilled_at - paid_at >= 2000
    if session_in_api:
        assert body["checkout_session_id"] == session["id"]
        assert body["client_reference_id"] == ORDER and len(body["line_items"]) == 2
    else:
        assert body["checkout_session"] is None and body["line_items"] is None
