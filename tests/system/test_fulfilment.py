"""Exactly-once fulfilment with real gunicorn, real RQ worker processes and a real sweeper."""

import signal
from concurrent.futures import ThreadPoolExecutor

from redis import Redis

from ledger import keys
from ledger.downstream import read_downstream
from ledger.read import payments, stats
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import state_of, watching_sweeper
from tests.support.processes import wait_until
from tests.support.stack import ROOMY


def settled(redis: Redis, payment_keys: list[str], state: str = "fulfilled") -> bool:
    return all(state_of(redis, pk) == state for pk in payment_keys)


def sqlite_path(config: dict[str, object]) -> str:
    return str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///")


def pk_of(events: list[dict]) -> str:
    return str(events[0]["data"]["object"]["id"])


def test_non_deduping_downstream_is_called_once_per_payment(stack, redis, rng) -> None:
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url, **ROOMY)  # 16 sender threads beside it
        s.start_web()
        s.start_worker()
        s.start_worker()
        s.start_sweeper()
        deliveries, payments = [], []
        for _ in range(100):
            events = samples.payment_events(rng, checkout=rng.random() < 0.5)
            payments.append(pk_of(events))
            deliveries += [e for e in events for _ in range(rng.randint(1, 3))]
        rng.shuffle(deliveries)
        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda e: s.send(samples.encode(e)).status_code, deliveries))
        assert set(statuses) == {200}
        wait_until(lambda: settled(redis, payments), timeout=60)
        assert len(downstream.calls) == 100
        assert set(downstream.calls.values()) == {1}
        assert set(downstream.idempotency_keys) == {f"fulfil:{pk}" for pk in payments}
        counted = stats.counters(redis)
        assert counted.payments_by_state["fulfilled"] == 100 and counted.effects == 100


def test_crash_after_action_sqlite_reruns_with_same_key(stack, redis, config, rng) -> None:
    s = stack()
    s.start_web()
    events = samples.payment_events(rng)
    s.send(samples.encode(events[2]))
    doomed = s.start_worker(FAULTPOINT="after_action")
    assert doomed.proc is not None
    assert doomed.proc.wait(20) == -signal.SIGKILL
    pk = pk_of(events)
    assert read_downstream(sqlite_path(config))["payments"][pk]["effects"] == 1
    assert state_of(redis, pk) == "in_progress"
    s.start_worker()
    s.start_sweeper()
    wait_until(lambda: settled(redis, [pk]))
    down = read_downstream(sqlite_path(config))["payments"][pk]
    assert down == {"calls": 2, "applied": 1, "already_applied": 1, "effects": 1}
    record = payments.payment(redis, pk)
    assert record is not None and record.attempts_started == 2
    first, second = record.attempts
    assert first.outcome == "lease_expired" and first.phase_at_expiry == "calling"
    assert second.outcome == "fulfilled"
    assert record.receipt is not None and record.receipt["outcome"] == "already_applied"


def test_crash_after_action_non_replay_safe_is_interrupted(stack, redis, rng, tmp_path) -> None:
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url)
        s.start_web()
        events = samples.payment_events(rng)
        s.send(samples.encode(events[2]))
        doomed = s.start_worker(FAULTPOINT="after_action")
        assert doomed.proc is not None and doomed.proc.wait(20) == -signal.SIGKILL
        s.start_worker()
        s.start_sweeper()
        pk = pk_of(events)
        wait_until(lambda: state_of(redis, pk) == "interrupted")
        wait_until(lambda: redis.zscore(keys.DUE, pk) is None, what="no longer due")
        assert downstream.calls[pk] == 1
        record = payments.payment(redis, pk)
        assert record is not None and "not replay-safe" in (record.last_error or "")
        assert stats.counters(redis).payments_by_state["interrupted"] == 1


def test_stale_worker_cannot_overwrite_a_newer_attempt(stack, redis, rng, tmp_path) -> None:
    """The first worker's call succeeds, then it stalls past its lease before recording it;
    a newer attempt fulfils; the late success of the old token changes nothing."""
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url, FULFILMENT_REPLAY_SAFE="true")
        s.start_web()
        watching_sweeper(s, redis)
        events = samples.payment_events(rng)
        pk = pk_of(events)
        s.send(samples.encode(events[2]))
        s.start_worker(FAULTPOINT="after_action:sleep:6")
        log = tmp_path / "worker.log"
        wait_until(lambda: log.exists() and "after_action" in log.read_text(), what="stalled")
        s.start_worker()
        wait_until(lambda: settled(redis, [pk]), what="newer attempt fulfils")
        newer = payments.payment(redis, pk)
        assert newer is not None and newer.attempts_started == 2
        wait_until(
            lambda: redis.hget(keys.payment(pk), "stale_finishes") == b"1", what="stale finish"
        )
        after = payments.payment(redis, pk)
        assert after is not None
        assert (after.state, after.attempts_started, after.receipt) == (
            "fulfilled",
            2,
            newer.receipt,
        )
        first = after.attempts[0]
        assert first.stale_outcome == "fulfilled" and first.stale_at is not None
        assert after.stale_finishes == 1
        assert downstream.calls[pk] == 2
