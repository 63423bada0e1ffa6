"""A payment only a thin event paid, with STRIPE_API_KEY: before its first call the worker
reads its PaymentIntent from Stripe's API (the local stand-in) once, and records it as a
synthetic paid record (ledger/purchase_reads.py). The call then carries the amount,
currency, customer and metadata; a refund in full recorded meanwhile is seen then, and
nothing is called; while the API does not answer the payment waits without an attempt."""

import json
from typing import Any

from redis import Redis

from ledger import keys
from ledger.downstream import open_downstream
from ledger.read import events, payments
from ledgerctl import samples
from tests.integration.test_thin_events import payment_intent, thin_event
from tests.support.helpers import settled_as
from tests.support.inprocess import Fulfilment
from tests.support.processes import wait_until
from tests.support.refunds import refund_events
from tests.support.stripe_api import API_KEY, EventsApi

THIN = "v1.payment_intent.succeeded"


def paid_by_its_thin_event(
    fulfilment: Any, stripe_api: EventsApi, rng: Any, key: bool = True
) -> tuple[Fulfilment, dict[str, Any]]:
    """The stand-in knows the PaymentIntent; only its thin event is delivered."""
    env = {"PAID_EVENT_TYPES": f"payment_intent.succeeded,{THIN}"}
    if key:
        env |= {"STRIPE_API_KEY": API_KEY, "STRIPE_API_BASE": stripe_api.url}
    f: Fulfilment = fulfilment(**env)
    intent = samples.payment_events(rng)[2]["data"]["object"]
    intent["metadata"] = {"sku": "tee-m"}
    stripe_api.intents[intent["id"]] = intent
    f.deliver(thin_event(rng, THIN, payment_intent(intent["id"])))
    return f, intent


def order_of(config: dict[str, object], pk: str) -> tuple[Any, ...] | None:
    db = open_downstream(str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))
    sql = "SELECT amount, currency, customer, purchase FROM orders WHERE payment_key = ?"
    return db.execute(sql, (pk,)).fetchone()


def test_the_call_carries_what_the_payment_intent_says(
    fulfilment, redis: Redis, rng, config, stripe_api: EventsApi
) -> None:
    f, intent = paid_by_its_thin_event(fulfilment, stripe_api, rng)
    pk = intent["id"]
    f.work()
    assert settled_as(redis, pk, "fulfilled")
    order = order_of(config, pk)
    assert order is not None
    assert order[:3] == (intent["amount_received"], intent["currency"], intent["customer"])
    assert json.loads(order[3])["metadata"]["payment_intent"] == {"sku": "tee-m"}
    assert stripe_api.checkout_requests[f"/v1/payment_intents/{pk}"] == 1
    timeline = payments.payment(redis, pk)
    assert timeline is not None and timeline.deliveries == 1  # the API's record is none
    assert [e.id for e in timeline.events][1:] == [f"evt_api_{pk}"]
    record = events.event(redis, f"evt_api_{pk}")
    assert record is not None and record.type == "payment_intent.retrieved"
    assert record.recorded_from.startswith("Stripe's API: the PaymentIntent its thin event paid")


def test_a_refund_in_full_before_the_read_is_seen_and_nothing_is_called(
    fulfilment, redis: Redis, rng, config, stripe_api: EventsApi
) -> None:
    """Without the read the payment has no amount, so a refund in full is not known as one
    and the refunded payment would be fulfilled."""
    f, intent = paid_by_its_thin_event(fulfilment, stripe_api, rng)
    pk, paid = intent["id"], intent["amount_received"]
    for event in refund_events(rng, pk, paid, paid):
        f.deliver(event)
    assert redis.hget(keys.payment(pk), "state") == b"queued"
    f.work()
    assert settled_as(redis, pk, "refunded_unfulfilled")
    assert order_of(config, pk) is None


def test_while_the_api_does_not_answer_the_payment_waits_without_an_attempt(
    fulfilment, redis: Redis, rng, config, stripe_api: EventsApi
) -> None:
    stripe_api.fail_for(503, 1.5)
    f, intent = paid_by_its_thin_event(fulfilment, stripe_api, rng)
    pk = intent["id"]
    f.work()
    fields = redis.hmget(keys.payment(pk), "state", "waiting", "token")
    assert fields == [b"retrying", keys.STRIPE_WAIT.encode(), b"0"]  # no attempt
    wait_until(lambda: (f.sweep(), f.work(), settled_as(redis, pk, "fulfilled"))[2], timeout=30)
    order = order_of(config, pk)
    assert order is not None and order[0] == intent["amount_received"]
    assert redis.hget(keys.payment(pk), "token") == b"1"  # one attempt, one call


def test_an_intent_stripe_does_not_have_is_read_once_and_fulfilled_without_its_amount(
    fulfilment, redis: Redis, rng, config, stripe_api: EventsApi
) -> None:
    f, intent = paid_by_its_thin_event(fulfilment, stripe_api, rng)
    pk = intent["id"]
    del stripe_api.intents[pk]
    f.work()
    assert settled_as(redis, pk, "fulfilled")
    order = order_of(config, pk)
    assert order is not None and order[0] is None
    assert stripe_api.checkout_requests[f"/v1/payment_intents/{pk}"] == 1


def test_without_stripe_api_key_nothing_is_read(
    fulfilment, redis: Redis, rng, config, stripe_api: EventsApi
) -> None:
    f, intent = paid_by_its_thin_event(fulfilment, stripe_api, rng, key=False)
    f.work()
    assert settled_as(redis, intent["id"], "fulfilled")
    assert not stripe_api.checkout_requests
