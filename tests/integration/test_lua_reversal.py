"""Refunds and disputes through the real scripts: what is recorded per refund id, when a
payment is never fulfilled, and when its reversal is due (docs/LEDGER.md, "What a refund
takes back")."""

import itertools
import json
import random

import pytest
from redis import Redis, ResponseError

from ledger import keys, settings
from ledger.attempts import Attempts
from ledger.deliveries import API_SOURCE, Delivery, Ledger, new_request_id
from ledger.events import classify
from ledger.purchase import purchase_of
from ledger.reversals import refulfil_of, reversal_of
from ledger.settings import Settings
from ledger.stored import text
from ledgerctl import samples
from tests.support.constants import BEARER
from tests.support.helpers import run_cli
from tests.support.refunds import dispute_closed, refund_events, refund_failed


def ledger_settings(redis_server, reverse: bool, **more: str) -> Settings:
    extra = {"REVERSAL_ACTION": "shop.actions:take_back", **more} if reverse else {}
    return settings.load(
        {}, REDIS_URL=redis_server.url, STRIPE_WEBHOOK_SECRET="whsec_x", STRIPE_MODE="test", **extra
    )


class Shop:
    def __init__(self, redis_server, rng: random.Random, reverse: bool = True, **more: str) -> None:
        self.s = ledger_settings(redis_server, reverse, **more)
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
    redis, redis_server, rng, config, client
) -> None:
    """The ledger ends that attempt (taken back), its worker never finishes it: the page
    and the CLI count it apart ('1 / 0' read like an attempt still running)."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", False)
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        shop.deliver(event)
    assert not shop.attempts.mark_calling(shop.pk, start.token)
    assert shop.state() == "refunded_unfulfilled"
    page = client.get(f"/ops/payments/{shop.pk}", headers=BEARER).get_data(as_text=True)
    assert '1 / 0 <span id="ended-by-the-ledger">(1 ended by the ledger)</span>' in page
    shown = run_cli(config, "payment", shop.pk).stdout
    assert "1 / 0 (1 ended by the ledger)" in shown, shown


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
    assert decide(shop.pk, "retry", ("held",), "ops:alice") == ("by_hand", "held")
    assert decide(shop.pk, "fulfilled", ("held",), "ops:alice") == ("ok", "fulfilled")
    assert shop.attempts.start(shop.pk, "job", True, leg="reverse").reason == "fulfilled"


def per_refund_shop(redis_server, rng, **more: str) -> Shop:
    shop = Shop(redis_server, rng, REVERSAL_PER_REFUND="1", **more)
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    return shop


def reversed_then_won(redis_server, rng) -> Shop:
    """REVERSAL_DISPUTE_WON=fulfil: fulfilled, reversed for a dispute lost; the dispute won,
    its fulfilment again is due (queued)."""
    shop = Shop(redis_server, rng, REVERSAL_DISPUTE_WON="fulfil")
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "lost"))
    assert shop.attempt("reverse") == "reversed"
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "won")) == "queued"
    assert shop.field("leg") == "refulfil"
    return shop


def reverse_all(shop: Shop) -> list[tuple[str, int, str]]:
    """Run every reversal due, one after the other: (refund id, amount, key) of each call."""
    calls = []
    while shop.state() == "queued" and shop.field("leg") == "reverse":
        start = shop.attempts.start(shop.pk, f"job-{shop.rng.random()}", True, leg="reverse")
        stored = {
            k.decode(): v.decode() for k, v in shop.redis.hgetall(keys.payment(shop.pk)).items()
        }
        call = reversal_of(purchase_of(shop.pk, start.token, stored), stored)
        calls.append((call.reversal.refund_id or "", call.reversal.amount, call.idempotency_key))
        shop.attempts.finish(shop.pk, start.token, "fulfilled", "{}", 1.0)
    return calls


@pytest.mark.parametrize("seed", range(6))
def test_per_refund_two_refunds_in_any_order_and_copies_are_each_reversed_once(
    redis, redis_server, rng, seed
) -> None:
    shop = per_refund_shop(redis_server, rng)
    first = shop.amount // 3
    a = refund_events(rng, shop.pk, shop.amount, first)
    b = refund_events(rng, shop.pk, shop.amount, shop.amount - first, refunded_before=first)
    # the charge lists every refund of it so far, as Stripe does when it lists them
    b[1]["data"]["object"]["refunds"]["data"].insert(0, a[2]["data"]["object"])
    events = (a + b) * 3
    random.Random(seed).shuffle(events)
    calls = []
    for i, event in enumerate(events):
        shop.deliver(event)
        if i % 4 == 3:  # reversals run while later copies and events still come
            calls += reverse_all(shop)
    calls += reverse_all(shop)
    ids = {a[0]["data"]["object"]["id"]: first, b[0]["data"]["object"]["id"]: shop.amount - first}
    assert sorted(calls) == sorted(
        (rid, amount, f"reverse:{shop.pk}:{rid}") for rid, amount in ids.items()
    )
    assert shop.state() == "reversed" and json.loads(shop.field("rv")) == ids
    assert shop.field("reversed_amount") == str(shop.amount)
    for event in events:
        assert shop.deliver(event) == "reversed"


def test_per_refund_a_partial_refund_is_reversed_and_the_payment_stays_fulfilled(
    redis, redis_server, rng
) -> None:
    shop = per_refund_shop(redis_server, rng)
    half = shop.amount // 2
    events = refund_events(rng, shop.pk, shop.amount, half)
    assert shop.deliver(events[1]) == "queued"  # charge.refunded first, listing the refund
    refund_id = events[0]["data"]["object"]["id"]
    assert reverse_all(shop) == [(refund_id, half, f"reverse:{shop.pk}:{refund_id}")]
    assert (shop.state(), shop.field("leg")) == ("fulfilled", "")
    for event in events * 2:
        assert shop.deliver(event) == "fulfilled"
    assert shop.redis.hget(keys.STATS, "refund_reversals") == b"1"


def test_per_refund_a_refund_before_the_effect_waits_for_it(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng, REVERSAL_PER_REFUND="1")
    shop.deliver(shop.paid)
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount // 4):
        assert shop.deliver(event) == "queued"  # partial: fulfilled first
    assert shop.attempts.start(shop.pk, "job-r", True, leg="reverse").reason == "leg"
    start = shop.attempts.start(shop.pk, "job-1", True)
    refund_events(rng, shop.pk, shop.amount, 1)
    assert shop.attempts.finish(shop.pk, start.token, "fulfilled", "{}", 1.0) == (
        "fulfilled",
        "queued",
    )
    assert shop.field("reversal_amount") == str(shop.amount // 4)


def test_per_refund_a_dispute_lost_reverses_what_remains_once(redis, redis_server, rng) -> None:
    shop = per_refund_shop(redis_server, rng)
    part = shop.amount // 4
    shop.deliver(refund_events(rng, shop.pk, shop.amount, part)[0])
    assert len(reverse_all(shop)) == 1
    lost = dispute_closed(rng, shop.pk, shop.amount - part, "lost")
    assert shop.deliver(lost) == "queued"
    assert reverse_all(shop) == [("", shop.amount - part, f"reverse:{shop.pk}")]
    assert shop.state() == "reversed" and shop.field("reversal_why") == "dispute"
    assert shop.deliver(lost) == "reversed"


@pytest.mark.parametrize("refund_failed", [False, True])
def test_per_refund_a_dispute_won_grants_again_what_the_dispute_took_back(
    redis, redis_server, rng, refund_failed: bool
) -> None:
    """A partial refund reversed on its own stands when the dispute that took the rest back
    is won: the fulfilment again carries that rest as its amount (before: the whole amount
    paid, granting the customer what they were refunded). A refund whose reversal a person
    granted back after it failed counts no longer: then the whole amount again."""
    shop = per_refund_shop(redis_server, rng, REVERSAL_DISPUTE_WON="fulfil")
    part = shop.amount // 4
    created, _, updated = refund_events(rng, shop.pk, shop.amount, part)
    shop.deliver(created)
    assert len(reverse_all(shop)) == 1
    if refund_failed:
        updated["data"]["object"]["status"] = "failed"
        assert shop.deliver(updated) == "held"
        assert shop.attempts.record_decision(shop.pk, "fulfilled", ("held",), "cli")[0] == "ok"
    lost = dispute_closed(rng, shop.pk, shop.amount - part, "lost")
    assert shop.deliver(lost) == "queued" and len(reverse_all(shop)) == 1
    won = dispute_closed(rng, shop.pk, shop.amount - part, "won")
    assert shop.deliver(won) == "queued" and shop.field("leg") == "refulfil"
    start = shop.attempts.start(shop.pk, "job-r", True, leg="refulfil")
    stored = {k.decode(): v.decode() for k, v in shop.redis.hgetall(keys.payment(shop.pk)).items()}
    call = refulfil_of(purchase_of(shop.pk, start.token, stored), stored)
    assert call.amount == (shop.amount if refund_failed else shop.amount - part)


def test_per_refund_a_dispute_won_held_says_what_stands_and_what_to_grant_back(
    redis, redis_server, rng
) -> None:
    """REVERSAL_DISPUTE_WON=hold: the person is told to grant back what the dispute's
    reversal took, not the whole purchase (before: "the customer keeps the purchase")."""
    shop = per_refund_shop(redis_server, rng)
    part = shop.amount // 4
    shop.deliver(refund_events(rng, shop.pk, shop.amount, part)[0])
    assert len(reverse_all(shop)) == 1
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount - part, "lost")) == "queued"
    assert len(reverse_all(shop)) == 1 and shop.state() == "reversed"
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount - part, "won")) == "held"
    reason = shop.field("hold_reason") or ""
    assert f"less the refunds that stand ({part}): grant back by hand what the dispute's " in reason
    assert reason.endswith(f"reversal took ({shop.amount - part}), then resolve it as fulfilled"
                           " (a retry runs nothing)"), reason  # fmt: skip


def test_per_refund_a_refund_failed_after_the_payment_was_reversed_names_it(
    redis, redis_server, rng
) -> None:
    """Two refunds each reversed, the payment reversed; one fails: a person grants back what
    its reversal took, the other refund stands (before: "the customer keeps the purchase")."""
    shop = per_refund_shop(redis_server, rng)
    part = shop.amount // 4
    first = refund_events(rng, shop.pk, shop.amount, part)
    shop.deliver(first[0])
    rest = refund_events(rng, shop.pk, shop.amount, shop.amount - part, refunded_before=part)
    shop.deliver(rest[0])
    assert len(reverse_all(shop)) == 2 and shop.state() == "reversed"
    failed = first[2]
    failed["data"]["object"]["status"] = "failed"
    assert shop.deliver(failed) == "held"
    reason = shop.field("hold_reason") or ""
    refund_id = failed["data"]["object"]["id"]
    assert f"less the refunds that stand ({shop.amount - part})" in reason, reason
    assert f"grant back by hand what the reversal of {refund_id} ({part}) took" in reason


def stored_of(shop: Shop) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in shop.redis.hgetall(keys.payment(shop.pk)).items()}


def reversed_then_refund_failed(shop: Shop, rng) -> int:
    """A refund of a quarter reversed on its own, a dispute lost that reverses the rest, then
    that refund failed while the payment is reversed (nothing holds it then): its amount."""
    part = shop.amount // 4
    created, _, updated = refund_events(rng, shop.pk, shop.amount, part)
    shop.deliver(created)
    assert len(reverse_all(shop)) == 1
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount - part, "lost")) == "queued"
    assert len(reverse_all(shop)) == 1 and shop.state() == "reversed"
    assert shop.deliver(refund_failed(rng, updated)) == "reversed"
    return part


def test_per_refund_a_dispute_won_grants_again_the_refunds_failed_since_too(
    redis, redis_server, rng
) -> None:
    """The refund reversed on its own failed: it stands no longer, so the fulfilment again
    carries the whole amount paid (the customer paid all of it); held, the reason says to
    grant back both what the dispute's reversal and that refund's took."""
    shop = per_refund_shop(redis_server, rng, REVERSAL_DISPUTE_WON="fulfil")
    part = reversed_then_refund_failed(shop, rng)
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount - part, "won")) == "queued"
    start = shop.attempts.start(shop.pk, "job-r", True, leg="refulfil")
    call = refulfil_of(purchase_of(shop.pk, start.token, stored_of(shop)), stored_of(shop))
    assert call.amount == shop.amount
    held = per_refund_shop(redis_server, rng)
    part = reversed_then_refund_failed(held, rng)
    assert held.deliver(dispute_closed(rng, held.pk, held.amount - part, "won")) == "held"
    reason = held.field("hold_reason") or ""
    assert (
        "less the refunds that stand (0): grant back by hand what the dispute's reversal " in reason
    )
    assert f"took ({held.amount - part}) and what the reversal of re_" in reason, reason
    assert f" ({part}) took, then resolve" in reason


def test_per_refund_a_refund_the_rest_reversed_failing_grants_back_the_rest(
    redis, redis_server, rng
) -> None:
    """A quarter refunded and reversed on its own; a ``charge.refunded`` without its refunds
    listed brings the rest, reversed as a whole; that unlisted refund fails: what the rest's
    reversal took goes back, the quarter stands (before: the whole purchase)."""
    shop = per_refund_shop(redis_server, rng)
    part = shop.amount // 4
    shop.deliver(refund_events(rng, shop.pk, shop.amount, part)[0])
    assert len(reverse_all(shop)) == 1
    rest = refund_events(rng, shop.pk, shop.amount, shop.amount - part, refunded_before=part)
    rest[1]["data"]["object"]["refunds"]["data"] = []
    shop.deliver(rest[1])
    assert reverse_all(shop) == [("", shop.amount - part, f"reverse:{shop.pk}")]
    assert shop.deliver(refund_failed(rng, rest[2])) == "held"
    reason = shop.field("hold_reason") or ""
    assert f"less the refunds that stand ({part}): grant back by hand what the rest's " in reason
    assert f"reversal took ({shop.amount - part})" in reason, reason


def test_per_refund_with_the_amount_paid_unknown_the_hold_names_no_figure(
    redis, redis_server, rng
) -> None:
    """Only a thin event paid it: reversals carry no amount, so no figure is made up."""
    shop = per_refund_shop(redis_server, rng)
    shop.redis.hdel(keys.payment(shop.pk), "amount")
    part = shop.amount // 4
    shop.deliver(refund_events(rng, shop.pk, shop.amount, part)[0])
    assert len(reverse_all(shop)) == 1
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount - part, "lost")) == "queued"
    assert len(reverse_all(shop)) == 1
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount - part, "won")) == "held"
    assert "the customer keeps the purchase; grant it again by hand" in (
        shop.field("hold_reason") or ""
    )


def test_per_refund_a_full_refund_no_known_refund_accounts_for_reverses_the_rest(
    redis, redis_server, rng
) -> None:
    """A ``charge.refunded`` without its refunds listed (API versions since 2022-11-15):
    what remains is reversed once; the refund's own events, later, change nothing."""
    shop = per_refund_shop(redis_server, rng)
    part = shop.amount // 4
    shop.deliver(refund_events(rng, shop.pk, shop.amount, part)[0])
    assert len(reverse_all(shop)) == 1
    rest = refund_events(rng, shop.pk, shop.amount, shop.amount - part, refunded_before=part)
    del rest[1]["data"]["object"]["refunds"]
    assert shop.deliver(rest[1]) == "queued"
    assert reverse_all(shop) == [("", shop.amount - part, f"reverse:{shop.pk}")]
    assert shop.deliver(rest[0]) == "reversed" and shop.deliver(rest[2]) == "reversed"


def test_a_dispute_won_after_its_reversal_is_fulfilled_again_once_under_the_setting(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng, REVERSAL_DISPUTE_WON="fulfil")
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "lost"))
    assert shop.attempt("reverse") == "reversed"
    won = dispute_closed(rng, shop.pk, shop.amount, "won")
    assert shop.deliver(won) == "queued" and shop.field("leg") == "refulfil"
    assert shop.attempts.start(shop.pk, "job-f", True).reason == "leg"
    start = shop.attempts.start(shop.pk, "job-r", True, leg="refulfil")
    stored = {k.decode(): v.decode() for k, v in shop.redis.hgetall(keys.payment(shop.pk)).items()}
    call = refulfil_of(purchase_of(shop.pk, start.token, stored), stored)
    assert (call.idempotency_key, call.amount) == (f"refulfil:{shop.pk}", shop.amount)
    assert shop.attempts.finish(shop.pk, start.token, "fulfilled", "{}", 1.0)[1] == "fulfilled"
    assert shop.field("refulfilled_at") and shop.field("reinstated_at")
    assert shop.deliver(won) == "fulfilled"
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "won")) == "fulfilled"
    stats = shop.redis.hgetall(keys.STATS)
    assert (stats[b"reinstated"], stats[b"refulfils_due"], stats[b"refulfilled"]) == (
        b"1",
        b"1",
        b"1",
    )
    assert shop.attempts.start(shop.pk, "job-again", True, leg="refulfil").reason == "fulfilled"


def test_a_dispute_won_while_its_reversal_runs_is_not_left_reversed_silently(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "lost"))
    start = shop.attempts.start(shop.pk, "job-r", True, leg="reverse")
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "won")) == "in_progress"
    assert shop.attempts.finish(shop.pk, start.token, "fulfilled", "{}", 1.0)[1] == "held"
    assert "dispute won after its reversal" in shop.field("hold_reason")


def test_a_malformed_reverse_on_is_refused_before_any_write(redis, redis_server, rng) -> None:
    shop = per_refund_shop(redis_server, rng)
    shop.deliver(refund_events(rng, shop.pk, shop.amount, 1)[0])
    script = shop.attempts.scripts["finish_attempt"]
    args = {
        "token": 1,
        "outcome": "fulfilled",
        "detail": "",
        "call_ms": "",
        "max_attempts": 5,
        "backoff_base_ms": 1,
        "backoff_cap_ms": 1,
        "reverse_on": "1 sometimes",
        "refused": 0,
    }
    with pytest.raises(ResponseError, match="reverse_on must be 0, or 1 followed by"):
        script({"payment": keys.payment(shop.pk)}, args)
    assert (shop.state(), shop.field("leg")) == ("queued", "reverse")


def test_a_fulfilment_again_interrupted_is_retried_or_resolved_as_any(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng, REVERSAL_DISPUTE_WON="fulfil")
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    receipt = shop.field("receipt")
    shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "lost"))
    assert shop.attempt("reverse") == "reversed"
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "won")) == "queued"
    assert shop.attempt("refulfil", "interrupted") == "interrupted"
    decide = shop.attempts.record_decision
    assert decide(shop.pk, "retry", ("interrupted",), "ops:alice") == ("ok", "queued")
    assert shop.attempt("refulfil", "interrupted") == "interrupted"
    assert decide(shop.pk, "fulfilled", ("interrupted",), "ops:bob") == ("ok", "fulfilled")
    assert shop.field("receipt") == receipt and "ops:bob" in shop.field("refulfil_receipt")


def test_a_dispute_lost_then_won_before_the_paid_event_is_never_fulfilled_but_held(
    redis, redis_server, rng
) -> None:
    """Found by the explorer (a program with disputes lost then won): the second closing
    event overwrote the first, so the paid event that came next queued the payment and it
    was fulfilled. Never fulfilled by the ledger, and never left refunded_unfulfilled either:
    the merchant kept the money, so a person grants it."""
    shop = Shop(redis_server, rng, reverse=False)
    for status in ("lost", "won"):
        assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, status)) == "pending"
    assert shop.deliver(shop.paid) == "held"
    assert shop.field("hold_reason").startswith("its dispute was won after it was taken back")
    assert shop.field("taken_back") == "dispute" and shop.field("reinstated_at")
    assert shop.redis.llen("rq:queue:fulfilment") == 0


def test_each_attempt_record_names_its_leg(redis, redis_server, rng) -> None:
    """The read model labels an attempt by the leg its record names (the token alone cannot
    tell the attempts of several per-refund reversals from a fulfilment's)."""
    shop = per_refund_shop(redis_server, rng, REVERSAL_DISPUTE_WON="fulfil")
    for part in (shop.amount // 4, shop.amount // 4):
        shop.deliver(refund_events(rng, shop.pk, shop.amount, part)[0])
        assert len(reverse_all(shop)) == 1 and shop.state() == "fulfilled"
    shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "lost"))
    assert len(reverse_all(shop)) == 1 and shop.state() == "reversed"
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "won")) == "queued"
    assert shop.attempt("refulfil") == "fulfilled"
    records = {
        int(k.split(b":")[1]): json.loads(v)
        for k, v in shop.redis.hgetall(keys.payment(shop.pk)).items()
        if k.startswith(b"attempt:")
    }
    assert [records[t].get("leg") for t in sorted(records)] == [
        "fulfil",
        "reverse",
        "reverse",
        "reverse",
        "refulfil",
    ]
