"""A downstream outage with real gunicorn, RQ workers and sweeper: the shared circuit
breaker stops the calls, payments wait without spending their attempts, and every one is
fulfilled exactly once when the downstream comes back. The test switches the downstream
down and up; the outage lasts a few cool-downs (counted probes), not a wall-clock time."""

import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import requests
from redis import Redis

from ledger import keys
from ledger.read import payments as read_payments
from ledger.read import stats
from ledger.stored import decode_hash
from ledgerctl import samples
from tests.support.constants import BEARER
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import paid_event, payment_key_of, state_of
from tests.support.processes import wait_until
from tests.support.stack import Stack

COOLDOWN = 1.0
WORKERS = 2
OUTAGE = {
    "MAX_ATTEMPTS": "3",
    "BREAKER_THRESHOLD": "3",
    "BREAKER_COOLDOWN_SECONDS": str(COOLDOWN),
}


def breaker(redis: Redis) -> dict[str, str]:
    return decode_hash(redis.hgetall(keys.BREAKER))


def start(stack: Callable[..., Stack], downstream: CountingDownstream, **extra: str) -> Stack:
    s = stack(FULFILMENT_ACTION=downstream.url, **{**OUTAGE, **extra})
    s.start_service(WORKERS)
    return s


def send_payments(s: Stack, rng: random.Random, count: int) -> list[str]:
    events = [paid_event(rng) for _ in range(count)]
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda e: s.send(e[1]).status_code, events))
    assert set(statuses) == {200}  # intake goes on during the outage
    return [payment_key_of(event) for event, _ in events]


def all_fulfilled(redis: Redis, payments: list[str]) -> bool:
    return all(state_of(redis, pk) == "fulfilled" for pk in payments)


def ride_out(redis: Redis, probes: int) -> tuple[float, float]:
    """Wait until the breaker has opened and ``probes`` probes failed; returns when it
    opened and now (epoch seconds)."""
    wait_until(lambda: int(breaker(redis).get("probes", 0)) >= probes, timeout=60)
    return int(breaker(redis)["opened_at"]) / 1000, time.time()


def assert_recovered(redis: Redis, downstream: CountingDownstream, payments: list[str]) -> None:
    wait_until(lambda: all_fulfilled(redis, payments), timeout=60, what="all fulfilled")
    assert {pk: downstream.successes[pk] for pk in payments} == {pk: 1 for pk in payments}
    counted = stats.counters(redis)
    assert (
        counted.payments_by_state["failed"] == 0 and counted.payments_by_state["interrupted"] == 0
    )
    assert breaker(redis)["state"] == "closed"
    assert all(redis.zcard(keys.waiting(r)) == 0 for r in keys.WAIT_REASONS)


def assert_probes_only(
    downstream: CountingDownstream, opened: float, down_until: float, spacing: float
) -> None:
    """While the breaker was open, only one probe per ``spacing`` reached the downstream
    (besides the calls already in flight when it opened: one per worker)."""
    slack = 0.2  # the in-flight calls arrive just after the breaker opens
    during = downstream.calls_between(opened + slack, down_until)
    assert len(during) <= (down_until - opened) / spacing + 1 + WORKERS, during


def test_503_outage_every_payment_fulfilled_once_none_failed(stack, redis, rng) -> None:
    with CountingDownstream() as downstream:
        s = start(stack, downstream)
        downstream.go_down(503)
        payments = send_payments(s, rng, 40)
        opened, down_until = ride_out(redis, probes=5)
        assert s.web is not None
        scraped = requests.get(f"{s.web.url}/metrics", headers=BEARER, timeout=10).text
        rows = read_payments.payments(redis, "retrying", 0, 50)
        downstream.come_back()
        assert rows and any(row.waiting == "breaker" for row in rows)
        assert 'webhook_downstream_breaker_open{action="fulfilment"} 1.0' in scraped
        assert 'webhook_fulfilment_waiting{reason="breaker"}' in scraped
        assert_probes_only(downstream, opened, down_until, COOLDOWN)
        assert_recovered(redis, downstream, payments)
        assert int(breaker(redis)["opens"]) >= 1


def test_refused_connections_spend_no_attempt(stack, redis, rng) -> None:
    with CountingDownstream() as downstream:
        s = start(stack, downstream, MAX_ATTEMPTS="1")
        downstream.refuse_connections()
        payments = send_payments(s, rng, 40)
        ride_out(redis, probes=5)
        downstream.listen()
        assert_recovered(redis, downstream, payments)
        # one attempt each, yet none failed: a refused call was never an attempt
        assert len(downstream.answered) == 40


def test_429_retry_after_is_honoured(stack, redis, rng) -> None:
    with CountingDownstream() as downstream:
        s = start(stack, downstream)
        downstream.go_down(429, retry_after=2)
        payments = send_payments(s, rng, 40)
        wait_until(lambda: breaker(redis).get("state") == "open", timeout=30)
        b = breaker(redis)
        assert int(b["open_until"]) - int(b["opened_at"]) >= 2000  # Retry-After, not 1 s
        opened, down_until = ride_out(redis, probes=3)
        downstream.come_back()
        assert_probes_only(downstream, opened, down_until, 2.0)
        assert_recovered(redis, downstream, payments)


def test_one_payment_refused_fails_alone_breaker_stays_closed(stack, redis, rng) -> None:
    with CountingDownstream() as downstream:
        s = start(stack, downstream)
        events = [paid_event(rng) for _ in range(20)]
        bad = payment_key_of(events[0][0])
        downstream.refusing.add(bad)
        for _, body in events:
            assert s.send(body).status_code == 200
        payments = [payment_key_of(e) for e, _ in events]
        wait_until(lambda: all_fulfilled(redis, payments[1:]), timeout=60)
        wait_until(lambda: state_of(redis, bad) == "failed", timeout=30)
        assert downstream.calls[bad] == 1
        assert breaker(redis).get("opens", "0") == "0"
        assert breaker(redis).get("state", "closed") == "closed"


def test_one_payment_refused_with_retry_after_spends_its_own_attempts(stack, redis, rng) -> None:
    """A per-customer quota: the downstream answers one payment 429 `Retry-After: 2` for
    ever and fulfils the 25 others, with the shipped breaker settings. One payment's word is
    no outage: the breaker never opens, the payment waits as asked between its attempts,
    spends them and ends `failed` for a person. Before, its first 429 opened the breaker for
    everyone, the open breaker refunded its attempt (so it never failed), and it probed and
    re-opened the breaker again and again: in 30 s 7 of 25 healthy payments fulfilled."""
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url)  # BREAKER_THRESHOLD 5, MAX_ATTEMPTS 5
        s.start_service(WORKERS)
        events = [paid_event(rng) for _ in range(26)]
        poison, healthy = payment_key_of(events[0][0]), [payment_key_of(e) for e, _ in events[1:]]
        downstream.quota[poison] = 2
        for _, body in events:
            assert s.send(body).status_code == 200

        def over() -> bool:
            return all_fulfilled(redis, healthy) and state_of(redis, poison) == "failed"

        wait_until(over, timeout=45, what="25 fulfilled and the refused payment failed")
        assert {pk: downstream.successes[pk] for pk in healthy} == {pk: 1 for pk in healthy}
        record = read_payments.payment(redis, poison)
        assert record is not None and record.attempts_started == downstream.calls[poison] == 5
        assert (record.last_error or "").startswith("http 429 from ")
        assert "refunds" not in decode_hash(redis.hgetall(keys.payment(poison)))
        calls = sorted(at for at, pk, _ in downstream.answered if pk == poison)
        assert all(b - a >= 1.9 for a, b in pairwise(calls)), calls  # Retry-After: 2
        assert breaker(redis).get("opens", "0") == "0"


def test_one_customers_quota_never_stalls_the_other_customers(stack, redis, rng) -> None:
    """Found by an outside review: the downstream answers every payment of one customer 429
    `Retry-After: 3600` (its quota); that customer's six payments opened the breaker (six
    witnesses) and the other customers' payments waited in `retrying` for its cool-down,
    renewed by the next probe of that customer, for over 13 minutes. One customer is one
    witness: the others are fulfilled at once and the breaker never opens."""
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url)  # BREAKER_THRESHOLD 5
        s.start_service(WORKERS)
        quota = [paid_event(rng)[0] for _ in range(6)]
        for event in quota:
            event["data"]["object"]["customer"] = "cus_quota"
            downstream.quota[payment_key_of(event)] = 3600
            assert s.send(samples.encode(event)).status_code == 200
        refused = [payment_key_of(e) for e in quota]
        wait_until(
            lambda: {state_of(redis, pk) for pk in refused} == {"retrying"}, 30, what="refused"
        )
        assert breaker(redis).get("failures") == "1"  # one customer, one witness
        others = [paid_event(rng) for _ in range(10)]
        for _, body in others:
            assert s.send(body).status_code == 200
        healthy = [payment_key_of(e) for e, _ in others]
        wait_until(lambda: all_fulfilled(redis, healthy), 30, what="the others fulfilled")
    assert {state_of(redis, pk) for pk in refused} == {"retrying"}
    assert breaker(redis).get("opens", "0") == "0"
