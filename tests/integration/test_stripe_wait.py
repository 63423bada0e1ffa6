"""The ledger's side of reading line items from Stripe's API: one request rate for every
worker (lua/stripe_rate.lua), a payment that waits for the API without an attempt
(lua/stripe_wait.lua), and line items kept once, never on a purged payment."""

import pytest
from redis import Redis
from redis.exceptions import ResponseError

from ledger import keys, settings
from ledger.connection import connect
from ledger.purchase_reads import PurchaseReads
from ledger.read import fulfilment as read_fulfilment
from ledger.scripts import Script
from ledger.stripe_api import StripeUnavailable
from tests.support.constants import BASIC, BEARER
from tests.support.helpers import cli_ok, payment_key_of, run_cli, state_of
from tests.support.inprocess import Fulfilment
from tests.support.purchases import checkout_purchase

CLOCK = "wl:test:clock"


def test_the_request_rate_is_shared_and_waits_for_the_oldest_to_age(redis: Redis) -> None:
    rate = Script(redis, "stripe_rate", CLOCK)
    redis.set(CLOCK, 1_000_000)
    assert [int(rate({}, {"max_rate": 3})) for _ in range(4)] == [0, 0, 0, 1000]
    redis.set(CLOCK, 1_000_400)
    assert int(rate({}, {"max_rate": 3})) == 600
    redis.set(CLOCK, 1_001_001)  # the first three are more than a second old
    assert int(rate({}, {"max_rate": 3})) == 0


def reads_of(config: dict[str, object]) -> PurchaseReads:
    given = {k: str(v) for k, v in config.items()}
    s = settings.load({**given, "STRIPE_API_KEY": "rk_test_x", "CHECKOUT_LINE_ITEMS": "true"})
    return PurchaseReads(connect(s), s, CLOCK)


def test_a_queued_payment_waits_for_stripe_doubling_and_a_settled_one_does_not(
    fulfilment, redis: Redis, rng, config
) -> None:
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    for event in events:
        f.deliver(event)
    pk = payment_key_of(events[2])
    items = reads_of(config)
    redis.set(CLOCK, 5_000_000)
    assert items.wait_for_stripe(pk, StripeUnavailable("Stripe's API: 429 RateLimitError")) == (
        5_001_000
    )
    assert state_of(redis, pk) == "retrying"
    assert redis.hget(keys.payment(pk), "waiting") == keys.STRIPE_WAIT.encode()
    assert redis.hget(keys.payment(pk), "token") == b"0"
    assert items.wait_for_stripe(pk, StripeUnavailable("again")) == 0  # not due yet
    redis.set(CLOCK, 5_001_000)
    assert items.wait_for_stripe(pk, StripeUnavailable("again", retry_after=0.5)) == 5_003_000
    redis.hset(keys.payment(pk), "state", "fulfilled")
    redis.set(CLOCK, 9_000_000)
    assert items.wait_for_stripe(pk, StripeUnavailable("late")) == 0


def test_what_is_read_is_kept_once_and_never_on_a_purged_payment(redis: Redis) -> None:
    keep = Script(redis, "keep_purchase")
    pay = {"payment": keys.payment("pi_kept")}
    assert keep(pay, {"fields": '{"p_items": "[]"}'}) == 0
    assert not redis.exists(keys.payment("pi_kept"))
    redis.hset(keys.payment("pi_kept"), mapping={"state": "queued", "p_cs": "cs_from_webhook"})
    assert keep(pay, {"fields": '{"p_items": "[[1]]", "p_cs": "cs_from_api"}'}) == 1
    assert keep(pay, {"fields": '{"p_items": "[[2]]"}'}) == 0
    assert redis.hmget(keys.payment("pi_kept"), "p_items", "p_cs") == [b"[[1]]", b"cs_from_webhook"]
    with pytest.raises(ResponseError, match="fields must map p_"):
        keep(pay, {"fields": '{"state": "fulfilled"}'})


def test_payments_waiting_for_their_purchase_are_shown_beside_the_gate_s(
    fulfilment, redis: Redis, rng, config, client
) -> None:
    """webhook_fulfilment_waiting, the dashboard's gate card, ``fulfilment status`` and the
    API count the payments waiting for Stripe's API and for their Checkout Session too, and
    webhook_fulfilment_deferred_total each such deferral by its reason."""
    f: Fulfilment = fulfilment()
    first, second = checkout_purchase(rng), checkout_purchase(rng)
    for event in (*first[:3], *second[:3]):
        f.deliver(event)
    items = reads_of(config)
    redis.set(CLOCK, 5_000_000)
    assert items.wait_for_stripe(payment_key_of(first[2]), StripeUnavailable("429"))
    args = {"reason": keys.CHECKOUT_WAIT, "base_ms": 1000, "cap_ms": 1000}
    waited = {**args, "retry_after_ms": 0, "detail": "no session yet"}
    assert items.wait({"payment": keys.payment(payment_key_of(second[2]))}, waited)
    expected = {"paused": 0, "breaker": 0, "reversal_breaker": 0, "rate": 0}
    expected |= {"stripe_api": 1, "checkout_session": 1}
    assert read_fulfilment.status(redis, f.settings).waiting == expected
    assert client.get("/ops/api/fulfilment", headers=BEARER).json["waiting"] == expected
    scraped = client.get("/metrics", headers=BEARER).get_data(as_text=True)
    assert 'webhook_fulfilment_waiting{reason="stripe_api"} 1.0' in scraped
    assert 'webhook_fulfilment_waiting{reason="checkout_session"} 1.0' in scraped
    assert 'webhook_fulfilment_deferred_total{reason="stripe_api"} 1.0' in scraped
    assert 'webhook_fulfilment_deferred_total{reason="checkout_session"} 1.0' in scraped
    page = client.get("/ops/", headers=BASIC).get_data(as_text=True)
    assert 'id="waiting-stripe_api">1<' in page and 'id="waiting-checkout_session">1<' in page
    shown = run_cli(config, "fulfilment", "status")
    assert cli_ok(shown) and "payments waiting: stripe_api" in shown.output
    assert "payments waiting: checkout_session" in shown.output


def test_a_payment_back_from_the_breaker_that_waits_for_stripe_leaves_the_breaker_set(
    fulfilment, redis: Redis, rng, config
) -> None:
    """Found by the protocol explorer (invariant 11): deferred by the open breaker, then
    re-queued with `waiting` still `breaker` (on its way back to the gate), then waiting for
    Stripe's API: its `waiting` said `stripe_api` while the breaker's set still held it."""
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    for event in events:
        f.deliver(event)
    pk = payment_key_of(events[2])
    redis.hset(keys.payment(pk), "waiting", "breaker")  # as gate.lua's deferral leaves it
    redis.zadd(keys.waiting("breaker"), {pk: 1})
    redis.set(CLOCK, 5_000_000)
    assert reads_of(config).wait_for_stripe(pk, StripeUnavailable("Stripe's API: 503")) > 0
    assert redis.hget(keys.payment(pk), "waiting") == keys.STRIPE_WAIT.encode()
    assert redis.zscore(keys.waiting("breaker"), pk) is None
