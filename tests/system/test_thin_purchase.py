"""An event destination that sends thin events only: the one call of a payment its thin
`v1.payment_intent.succeeded` paid carries what its PaymentIntent says, read once from
Stripe's API (the local stand-in) by a real worker behind a real gunicorn."""

from redis import Redis

from ledgerctl import samples
from tests.integration.test_thin_events import payment_intent, thin_event
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import state_of
from tests.support.processes import wait_until
from tests.support.purchases import purchase_validator
from tests.support.stripe_api import API_KEY, EventsApi

THIN = "v1.payment_intent.succeeded"


def test_a_thin_paid_payment_is_fulfilled_with_its_payment_intent(
    stack, redis: Redis, rng, stripe_api: EventsApi
) -> None:
    intent = samples.payment_events(rng)[2]["data"]["object"]
    intent["metadata"] = {"sku": "tee-m"}
    stripe_api.intents[intent["id"]] = intent
    pk = intent["id"]
    with CountingDownstream() as downstream:
        s = stack(
            FULFILMENT_ACTION=downstream.url,
            PAID_EVENT_TYPES=f"payment_intent.succeeded,{THIN}",
            STRIPE_API_KEY=API_KEY,
            STRIPE_API_BASE=stripe_api.url,
        )
        s.start_web()
        s.start_worker()
        s.start_sweeper()
        thin = thin_event(rng, THIN, payment_intent(pk))
        assert s.send(samples.encode(thin)).status_code == 200
        wait_until(lambda: state_of(redis, pk) == "fulfilled", what="fulfilled")
    [body] = downstream.bodies
    assert purchase_validator().is_valid(body)
    assert (body["amount"], body["currency"]) == (intent["amount_received"], intent["currency"])
    assert body["customer"] == intent["customer"]
    assert body["metadata"]["payment_intent"] == {"sku": "tee-m"}
    assert body["event_ids"] == [thin["id"], f"evt_api_{pk}"]
    assert stripe_api.checkout_requests[f"/v1/payment_intents/{pk}"] == 1
