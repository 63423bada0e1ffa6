"""An interrupted fulfilment that Stripe took back meanwhile: the lists say so first, since
it decides what a person does (resolve --fulfilled reverses it; --retry ends it refunded
unfulfilled without a call); given back since, they no longer do."""

from ledger import keys
from ledger import settings as settings_module
from ledger.read import payments, stats
from ledger.read.payment_reasons import reason
from tests.integration.test_lua_reversal import Shop
from tests.support.constants import BEARER
from tests.support.helpers import run_cli
from tests.support.refunds import dispute_closed, refund_events


def interrupted(shop: Shop) -> None:
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", False)
    assert shop.attempts.mark_calling(shop.pk, start.token)
    assert shop.attempts.finish(shop.pk, start.token, "interrupted", "died", 1.0)[1] == (
        "interrupted"
    )


def test_the_lists_say_it_was_refunded_in_full_since(
    redis, redis_server, rng, config, client
) -> None:
    shop = Shop(redis_server, rng)
    interrupted(shop)
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        assert shop.deliver(event) == "interrupted"
    row = payments.payments(redis, "interrupted")[0]
    assert (row.taken_back, reason(row)) == ("refund", "refunded in full since; died")
    listed = run_cli(config, "payments", "--state", "interrupted").stdout
    assert "refunded in full since; died" in listed, listed
    page = client.get("/ops/payments?state=interrupted", headers=BEARER).get_data(as_text=True)
    assert "refunded in full since; died" in page
    answer = client.get("/ops/api/payments?state=interrupted", headers=BEARER).get_json()
    assert [p["taken_back"] for p in answer["payments"]] == ["refund"]
    said = run_cli(config, "resolve", shop.pk, "--retry").stdout
    assert said.startswith(f"{shop.pk}: queued (refunded in full since: its next attempt does")
    start = shop.attempts.start(shop.pk, "job-2", False)
    assert start.verdict != "go" and shop.state() == "refunded_unfulfilled"  # as it said


def test_a_dispute_lost_then_won_since_is_no_longer_said(redis, redis_server, rng, client) -> None:
    shop = Shop(redis_server, rng)
    interrupted(shop)
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "lost")) == "interrupted"
    row = payments.payments(redis, "interrupted")[0]
    assert (row.taken_back, reason(row)) == ("dispute", "a dispute lost since; died")
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "won")) == "interrupted"
    row = payments.payments(redis, "interrupted")[0]
    assert (row.taken_back, reason(row)) == (None, "died")
    record = payments.payment(redis, shop.pk)
    assert record is not None and record.taken_back is None
    assert record.reversal is not None and record.reversal.taken_back is None  # the card's
    page = client.get(f"/ops/payments/{shop.pk}", headers=BEARER).get_data(as_text=True)
    assert 'id="taken-back"><span class="muted">no: nothing to take back' in page


def test_a_refund_of_a_payment_with_no_paid_record_says_nothing_was_reversed(
    redis, redis_server, rng, config, client
) -> None:
    """A payment purged after PAYMENT_RETENTION_DAYS, then refunded in full: its refund's
    events make a record with no paid event, and the lists say what that means."""
    shop = Shop(redis_server, rng)  # its paid event never delivered (as if purged)
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        assert shop.deliver(event) == "pending"
    row = payments.payments(redis, "pending")[0]
    assert reason(row) == (
        "refunded, with no paid record yet (its paid event may still come; else purged after "
        "PAYMENT_RETENTION_DAYS, or paid before this ledger ran): nothing reversed"
    )
    assert "with no paid record" in run_cli(config, "payments", "--state", "pending").stdout
    page = client.get(f"/ops/payments/{shop.pk}", headers=BEARER).get_data(as_text=True)
    assert 'id="taken-back">refunded <span class="muted">(no paid record' in page
    assert shop.deliver(shop.paid) == "refunded_unfulfilled"  # it came: never called


def test_a_payment_a_person_marked_fulfilled_stays_out_of_the_latency_whatever_came_next(
    redis, redis_server, rng
) -> None:
    """Resolved as fulfilled hours after it was paid, then a later decision on it (a retry
    of its reversal, say): still a person's fulfilment, not a latency. Before, the filter
    read the last decision only."""
    shop = Shop(redis_server, rng)
    interrupted(shop)
    assert shop.attempts.record_decision(shop.pk, "fulfilled", ("interrupted",), "cli")[0] == "ok"
    redis.hset(keys.payment(shop.pk), "resolved_decision", "retry")  # a later leg's decision
    other = Shop(redis_server, rng)
    other.deliver(other.paid)
    assert other.attempt() == "fulfilled"
    latency = stats.summary(redis, settings_module.load({})).fulfil_latency
    assert latency.payments == 1  # the worker's, not the person's
    assert redis.hget(keys.payment(shop.pk), "fulfilled_by_hand") == b"1"
    assert redis.hget(keys.payment(other.pk), "fulfilled_by_hand") is None
