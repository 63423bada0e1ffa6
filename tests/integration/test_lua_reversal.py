"""Refunds and disputes through the real scripts: what is recorded per refund id, when a
payment is never fulfilled, and when its reversal is due (docs/LEDGER.md, "What a refund
takes back")."""

import itertools
import json
import random

import pytest
from redis import Redis

from ledger import keys, settings
from ledger.attempts import Attempts
from ledger.deliveries import API_SOURCE, Delivery, Ledger, new_request_id
from ledger.events import classify
from ledger.settings import Settings
from ledger.stored import text
from ledgerctl import samples
from tests.support.refunds import dispute_closed, refund_events


def ledger_settings(redis_server, reverse: bool) -> Settings:
    extra = {"REVERSAL_ACTION": "shop.actions:take_back"} if reverse else {}
    return settings.load(
        {}, REDIS_URL=redis_server.url, STRIPE_WEBHOOK_SECRET="whsec_x", STRIPE_MODE="test", **extra
    )


class Shop:
    def __init__(self, redis_server, rng: random.Random, reverse: bool = True) -> None:
        self.s = ledger_settings(redis_server, reverse)
        self.redis = Redis.from_url(self.s.REDIS_URL)
        self.ledger = Ledger(self.redis, self.s)
        self.attempts = Attempts(self.redis, self.s)
        self.rng = rng
        self.paid = samples.payment_events(rng)[2]
        self.pk = str(self.paid["data"]["object"]["id"])
        self.amount = int(self.paid["data"]["object"]["amount_received"])

    def deliver(self, event: dict, source: str = "stripe") -> str:
        body = samples.encode(event)
        c = classify(event, self.s.policy)
        self.ledger.record_delivery(Delivery(event, body, c, "x", source, new_request_id()))
        return self.state()

    def state(self) -> str:
        return text(self.redis.hget(keys.payment(self.pk), "state"))

    def field(self, name: str) -> str:
        value = self.redis.hget(keys.payment(self.pk), name)
        return text(value) if value is not None else ""

    def attempt(self, leg: str = "fulfil", outcome: str = "fulfilled") -> str:
        start = self.attempts.start(self.pk, f"job-{self.rng.random()}", True, leg=leg)
        assert start.verdict == "go", start
        return self.attempts.finish(self.pk, start.token, outcome, "{}", 1.0)[1]


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_a_full_refund_in_any_order_and_copies_makes_one_reversal_due(
    redis, redis_server, rng, order
) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    events = refund_events(rng, shop.pk, shop.amount, shop.amount)
    for i in order:
        for _ in range(3):  # each delivered three times
            shop.deliver(events[i])
    assert (shop.state(), shop.field("leg"), shop.field("reversal_why")) == (
        "queued",
        "reverse",
        "refund",
    )
    assert json.loads(shop.field("rf")) == {events[0]["data"]["object"]["id"]: shop.amount}
    # a fulfilment job finds the reversal's leg due and calls nothing
    assert shop.attempts.start(shop.pk, "old-job", True).reason == "leg"
    assert shop.attempt("reverse") == "reversed"
    assert shop.redis.hget(keys.PAYMENT_STATE_COUNTS, "reversed") == b"1"
    for event in events:
        shop.deliver(event)
    assert shop.state() == "reversed"
    assert shop.attempts.start(shop.pk, "late", True, leg="reverse").reason == "reversed"


def test_without_a_reversal_action_a_refunded_fulfilled_payment_stays_fulfilled(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng, reverse=False)
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        assert shop.deliver(event) == "fulfilled"
    assert shop.field("leg") == "" and shop.field("taken_back") == "refund"


@pytest.mark.parametrize("reverse", [False, True])
def test_refunded_while_queued_is_never_fulfilled(redis, redis_server, rng, reverse) -> None:
    shop = Shop(redis_server, rng, reverse)
    shop.deliver(shop.paid)
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        shop.deliver(event)
    assert shop.state() == "refunded_unfulfilled"
    assert shop.attempts.start(shop.pk, "job", True).reason == "refunded_unfulfilled"
    assert shop.field("token") == "0"


def test_refunded_before_the_paid_event_is_never_queued(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        shop.deliver(event)
    assert shop.state() == "pending"
    assert shop.deliver(shop.paid) == "refunded_unfulfilled"
    assert shop.redis.llen("rq:queue:fulfilment") == 0


def test_refunded_while_retrying_is_never_fulfilled_by_the_next_attempt(
    redis, redis_server, rng
) -> None:
    """A refusal (retry) of an action that is not replay-safe applied nothing."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", False)
    assert shop.attempts.mark_calling(shop.pk, start.token)
    assert shop.attempts.finish(shop.pk, start.token, "retry", "503", 1.0)[1] == "retrying"
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        shop.deliver(event)
    assert shop.state() == "refunded_unfulfilled"


def test_refunded_after_a_replay_safe_attempt_that_may_have_applied_is_held(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.attempt(outcome="retry") == "retrying"
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        shop.deliver(event)
    assert shop.state() == "held" and "may have applied" in shop.field("hold_reason")


def test_refunded_during_the_call_is_reversed_after_it(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", True)
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        assert shop.deliver(event) == "in_progress"
    assert shop.attempts.finish(shop.pk, start.token, "fulfilled", "{}", 1.0) == (
        "fulfilled",
        "queued",
    )
    assert shop.field("leg") == "reverse"
    # the fulfilment's own receipt, replayed, is no reversal's
    assert shop.attempts.finish(shop.pk, start.token, "fulfilled", "{}", 1.0)[0] == "already"
    assert shop.attempt("reverse") == "reversed"


def test_refunded_before_the_fence_of_an_action_that_is_not_replay_safe_is_not_called(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", False)
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        shop.deliver(event)
    assert not shop.attempts.mark_calling(shop.pk, start.token)
    assert shop.state() == "refunded_unfulfilled"


def test_a_partial_refund_reverses_nothing_and_a_second_completes_it(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    half = shop.amount // 2
    for event in refund_events(rng, shop.pk, shop.amount, half) * 2:
        assert shop.deliver(event) == "fulfilled"
    rest = refund_events(rng, shop.pk, shop.amount, shop.amount - half, refunded_before=half)
    assert shop.deliver(rest[0]) == "queued"  # refund.created of the rest: refunded in full


def test_a_failed_refund_counts_nothing_whatever_the_order(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    created, _, updated = refund_events(rng, shop.pk, shop.amount, shop.amount)
    updated["data"]["object"]["status"] = "failed"
    assert shop.deliver(updated) == "fulfilled"
    assert shop.deliver(created) == "fulfilled"


@pytest.mark.parametrize("status,due", [("lost", True), ("won", False)])
def test_a_lost_dispute_makes_a_reversal_due(redis, redis_server, rng, status, due) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    shop.deliver(dispute_closed(rng, shop.pk, shop.amount, status))
    assert shop.state() == ("queued" if due else "fulfilled")
    assert shop.field("dispute").endswith(" " + status)


def test_an_interrupted_payment_refunded_waits_for_a_person_and_is_reversed_if_it_applied(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", False)
    assert shop.attempts.mark_calling(shop.pk, start.token)
    assert shop.attempts.finish(shop.pk, start.token, "interrupted", "timeout", 1.0)[1] == (
        "interrupted"
    )
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        assert shop.deliver(event) == "interrupted"
    assert shop.field("taken_back") == "refund"
    verdict = shop.attempts.record_decision(shop.pk, "fulfilled", ("interrupted",), "ops:alice")
    assert verdict == ("ok", "queued") and shop.field("leg") == "reverse"


def test_a_refund_found_only_through_the_events_api_is_reversed(redis, redis_server, rng) -> None:
    """Reconcile records what Stripe gave up delivering as source api: the same rules."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    charged = refund_events(rng, shop.pk, shop.amount, shop.amount)[1]
    assert shop.deliver(charged, source=API_SOURCE) == "queued"
    assert shop.field("leg") == "reverse"


def test_a_dispute_won_after_its_reversal_waits_for_a_person(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "lost"))
    assert shop.attempt("reverse") == "reversed"
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "won")) == "held"
    assert "dispute won after its reversal" in shop.field("hold_reason")
    decide = shop.attempts.record_decision
    assert decide(shop.pk, "retry", ("held",), "ops:alice") == ("refused", "held")
    assert decide(shop.pk, "fulfilled", ("held",), "ops:alice") == ("ok", "fulfilled")
    assert shop.attempts.start(shop.pk, "job", True, leg="reverse").reason == "fulfilled"
