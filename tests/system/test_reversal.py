"""Refunds and disputes with real gunicorn, real RQ workers and a real sweeper: a reversal
once per payment after its effect, never a fulfilment after a refund (docs/REVERSAL.md)."""

import itertools
import random
import signal
import sqlite3

import pytest

from ledger import keys
from ledger.gate import Gate
from ledger.settings import load
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import after_sweeps, settled_as, state_of
from tests.support.processes import wait_until
from tests.support.refunds import dispute_closed, refund_events
from tests.support.stack import Stack

SLOW = {"FULFILMENT_TIMEOUT": "5", "LEASE_SECONDS": "12"}


def paid(s: Stack, rng: random.Random) -> tuple[str, int]:
    """One card payment's events sent: its key and amount."""
    events = samples.payment_events(rng)
    for event in events:
        assert s.send(samples.encode(event)).status_code == 200
    obj = events[2]["data"]["object"]
    return str(obj["id"]), int(obj["amount_received"])


def send_all(s: Stack, events: list[dict]) -> None:
    for event in events:
        assert s.send(samples.encode(event)).status_code == 200


def test_a_full_refund_in_every_order_three_times_is_reversed_once(stack, redis, rng) -> None:
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        s = stack(FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=reverse.url)
        s.start_service()
        bought = [paid(s, rng) for _ in itertools.permutations(range(3))]
        wait_until(lambda: all(settled_as(redis, pk, "fulfilled") for pk, _ in bought))
        for (pk, amount), order in zip(bought, itertools.permutations(range(3)), strict=True):
            events = refund_events(rng, pk, amount, amount)
            send_all(s, [events[i] for i in order for _ in range(3)])
        wait_until(lambda: all(settled_as(redis, pk, "reversed") for pk, _ in bought))
        after_sweeps(redis)
        for pk, amount in bought:
            assert (fulfil.calls[pk], reverse.calls[pk]) == (1, 1)
            body = next(b for b in reverse.bodies if b["payment_key"] == pk)
            assert body["idempotency_key"] == f"reverse:{pk}"
            assert body["reversal"]["why"] == "refund"
            assert body["reversal"]["refunded_amount"] == amount
        assert set(reverse.idempotency_keys) == {f"reverse:{pk}" for pk, _ in bought}
        assert redis.hget(keys.PAYMENT_STATE_COUNTS, "reversed") == b"6"


def test_paid_and_refunded_while_paused_is_never_called(stack, redis, config, rng) -> None:
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        s = stack(FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=reverse.url)
        gate = Gate(redis, load({}, **{k: str(v) for k, v in config.items()}))
        gate.pause("test", "refund while paused")
        s.start_service()
        pk, amount = paid(s, rng)
        wait_until(lambda: redis.zscore(keys.waiting("paused"), pk) is not None, what="waiting")
        send_all(s, refund_events(rng, pk, amount, amount))
        gate.resume("test")
        after_sweeps(redis, 3)
        assert settled_as(redis, pk, "refunded_unfulfilled")
        assert (fulfil.calls[pk], reverse.calls[pk]) == (0, 0)


def test_a_refund_during_a_slow_fulfilment_call_is_reversed_after_it(stack, redis, rng) -> None:
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        held = fulfil.hold_first_call()
        s = stack(FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=reverse.url, **SLOW)
        s.start_service()
        pk, amount = paid(s, rng)
        wait_until(lambda: fulfil.in_flight[pk] == 1, what="the fulfilment call in flight")
        send_all(s, refund_events(rng, pk, amount, amount))
        assert state_of(redis, pk) == "in_progress"
        held.set()
        wait_until(lambda: settled_as(redis, pk, "reversed"))
        assert (fulfil.calls[pk], reverse.calls[pk]) == (1, 1)
        first, second = fulfil.answered[0], reverse.answered[0]
        assert first[0] <= second[0]  # the reversal came after the fulfilment's call


def test_a_partial_refund_reverses_nothing(stack, redis, rng) -> None:
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        s = stack(FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=reverse.url)
        s.start_service()
        pk, amount = paid(s, rng)
        wait_until(lambda: settled_as(redis, pk, "fulfilled"))
        send_all(s, refund_events(rng, pk, amount, amount // 2) * 2)
        after_sweeps(redis, 3)
        assert settled_as(redis, pk, "fulfilled") and reverse.calls[pk] == 0
        assert redis.hget(keys.payment(pk), "taken_back") is None


def test_a_lost_dispute_marks_the_sqlite_order_reversed_once(stack, redis, config, rng) -> None:
    """The built-in SQLite downstream for both: the order row marked reversed in the
    transaction that records the reversal's key."""
    s = stack(REVERSAL_ACTION=str(config["FULFILMENT_ACTION"]))
    s.start_service()
    pk, amount = paid(s, rng)
    wait_until(lambda: settled_as(redis, pk, "fulfilled"))
    lost = dispute_closed(rng, pk, amount, "lost")
    send_all(s, [lost, lost])
    wait_until(lambda: settled_as(redis, pk, "reversed"))
    db = sqlite3.connect(str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))
    orders = db.execute("SELECT idempotency_key, reversed_at FROM orders").fetchall()
    assert len(orders) == 1 and orders[0][0] == f"fulfil:{pk}" and orders[0][1] is not None
    reversals = db.execute("SELECT idempotency_key, reversal FROM reversals").fetchall()
    assert [key for key, _ in reversals] == [f"reverse:{pk}"]
    assert '"why": "dispute"' in reversals[0][1]
    calls = db.execute("SELECT outcome FROM reversal_calls").fetchall()
    assert calls == [("applied",)]


@pytest.mark.parametrize("replay_safe", [True, False])
def test_a_worker_killed_during_its_reversal_call(stack, redis, config, rng, replay_safe) -> None:
    """Replay-safe (the built-in SQLite downstream): run again, one reversal. Not (an HTTP
    downstream that never dedupes): interrupted, for a person, never called again."""
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        target = str(config["FULFILMENT_ACTION"]) if replay_safe else reverse.url
        s = stack(FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=target)
        s.start_web()
        first = s.start_worker()
        s.start_sweeper()
        pk, amount = paid(s, rng)
        wait_until(lambda: settled_as(redis, pk, "fulfilled"))
        first.stop()
        doomed = s.start_worker(FAULTPOINT="after_action")
        send_all(s, refund_events(rng, pk, amount, amount))
        assert doomed.proc is not None and doomed.proc.wait(20) == -signal.SIGKILL
        s.start_worker()
        if replay_safe:
            wait_until(lambda: settled_as(redis, pk, "reversed"))
            db = sqlite3.connect(target.removeprefix("sqlite:///"))
            calls = db.execute("SELECT outcome FROM reversal_calls").fetchall()
            assert calls == [("applied",), ("already_applied",)]
            assert db.execute("SELECT COUNT(*) FROM reversals").fetchone() == (1,)
        else:
            wait_until(lambda: settled_as(redis, pk, "interrupted"))
            after_sweeps(redis)
            assert redis.hget(keys.payment(pk), "leg") == b"reverse"
            assert (redis.hget(keys.payment(pk), "last_error") or b"").startswith(b"reversal: ")
            assert reverse.calls[pk] == 1
        assert fulfil.calls[pk] == 1
