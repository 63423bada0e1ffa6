"""Every payment ends, or a person is told: a call that outlives its lease, a job that kills
its worker, an action that cannot be loaded, a payment left queued; and the workers counted
alive are the ones alive. Real gunicorn, RQ workers and sweeper; the downstream counts every
call and never dedupes."""

import signal
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

import pytest

from ledger import settings
from ledger.read import payments, stats
from ledger.read.stats import Workers
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import payment_key_of, settled_as, state_of
from tests.support.processes import BIN, spawn, wait_until


def pay(stack, rng, **env: str):
    """Web and sweeper with ``env``, one paid event sent; the stack and the payment key."""
    s = stack(**env)
    s.start_web()
    s.start_sweeper()
    event = samples.payment_events(rng)[2]
    assert s.send(samples.encode(event)).status_code == 200
    return s, payment_key_of(event)


@pytest.mark.parametrize("replay_safe", [True, False])
def test_a_trickling_answer_is_cut_at_the_deadline(replay_safe: bool, stack, redis, rng) -> None:
    """The answer a byte at a time for 6 s, its status line first (lease 3 s, deadline 1 s):
    no status line within the deadline. (A 200 whose body trickles is done at its status
    line: tests/integration/test_http_answers.py.)"""
    with CountingDownstream(head_trickles=[6.0]) as downstream:
        s, pk = pay(
            stack,
            rng,
            FULFILMENT_ACTION=downstream.url,
            FULFILMENT_REPLAY_SAFE=str(replay_safe).lower(),
            RETRY_BASE_SECONDS="1",
        )
        s.start_worker()
        if replay_safe:  # cut, retried once the first call is gone, fulfilled
            wait_until(lambda: settled_as(redis, pk, "fulfilled"), what="fulfilled")
            assert downstream.calls[pk] == 2 and downstream.most_in_flight[pk] == 1
            assert getattr(payments.payment(redis, pk), "attempts_started", 0) == 2
        else:  # it may have been applied and cannot be re-run: a person decides
            wait_until(lambda: settled_as(redis, pk, "interrupted"), what="interrupted")
            assert downstream.calls[pk] == 1
            assert "deadline" in (getattr(payments.payment(redis, pk), "last_error", "") or "")


@pytest.mark.parametrize("replay_safe", [True, False])
def test_a_job_that_kills_its_worker_ends_for_a_person(
    replay_safe: bool, stack, redis, rng
) -> None:
    s, pk = pay(
        stack,
        rng,
        FULFILMENT_ACTION="tests.support.broken_actions:exit_worker",
        FULFILMENT_REPLAY_SAFE=str(replay_safe).lower(),
        MAX_ATTEMPTS="2",
    )
    final = "failed" if replay_safe else "interrupted"
    for _ in range(4):  # a supervisor restarting the dead worker, bounded
        worker = s.start_worker()
        assert worker.proc is not None and worker.proc.wait(60) == 1
        wait_until(lambda: state_of(redis, pk) != "in_progress", what="swept")
        if settled_as(redis, pk, final):
            break
    wait_until(lambda: settled_as(redis, pk, final), what=final)
    record = payments.payment(redis, pk)
    assert record is not None
    if replay_safe:
        assert record.attempts_started == 2 and "worker died" in (record.last_error or "")
        assert "2 times" in (record.last_error or "")
    else:  # died during the call: never re-run blindly
        assert record.attempts_started == 1
        assert "interrupted during the downstream call" in (record.last_error or "")
    assert pk in [p.payment_key for p in payments.payments(redis, payments.ATTENTION)]


@dataclass
class Spawned:
    proc: Popen


def ends_interrupted(redis, pk: str, worker: Popen) -> bool:
    """The payment's attempt ends ``interrupted`` by the call's error, its worker alive."""
    ended = ("interrupted", "fulfilled", "failed")
    wait_until(lambda: worker.poll() is not None or state_of(redis, pk) in ended)
    assert worker.poll() is None
    record = payments.payment(redis, pk)
    assert record is not None and "the call ended with" in (record.last_error or "")
    return state_of(redis, pk) == "interrupted"


@pytest.mark.parametrize(
    ("action", "slots"),
    [("exit_in_action", 1), ("exit_in_action", 4), ("interrupt_in_action", 1)],
)
def test_an_action_that_exits_is_an_error_of_the_action(
    action: str, slots: int, stack, redis, rng, tmp_path: Path
) -> None:
    """``sys.exit()`` (or KeyboardInterrupt) in the user's code must neither end the worker
    as a clean stop (exit code 0: its supervisor and a platform would not start it again)
    nor leave the payment to its lease: the attempt ends at once, as any error of the action
    (no sweeper runs here), and the same worker takes the next payment."""
    s = stack(
        FULFILMENT_ACTION=f"tests.support.broken_actions:{action}",
        FULFILMENT_CONCURRENCY=str(slots),
        LEASE_SECONDS="60",
    )
    s.start_web()
    worker = spawn([str(BIN / "fulfilment-worker")], s.env, tmp_path / "worker.log")
    s.parts.add(Spawned(worker))
    for event in (samples.payment_events(rng)[2], samples.payment_events(rng)[2]):
        assert s.send(samples.encode(event)).status_code == 200
        assert ends_interrupted(redis, payment_key_of(event), worker)
    assert "starting another" not in (tmp_path / "worker.log").read_text()  # workers/supervise.py


def test_a_killed_worker_is_not_counted_alive(stack, redis) -> None:
    """RQ keeps a killed worker's registration for minutes (until its key expires); the
    summary counts the workers alive from their heartbeat and their Redis connection."""
    s = stack()
    s.start_worker()
    doomed = s.start_worker()

    def workers() -> Workers:
        return stats.summary(redis, settings.load({})).workers

    wait_until(lambda: workers().alive == 2, what="two workers alive")
    doomed.signal(signal.SIGKILL)
    assert doomed.proc is not None and doomed.proc.wait(10) == -signal.SIGKILL
    wait_until(lambda: workers().alive == 1, what="the killed one no longer alive")
    seen = workers()
    assert (seen.alive, seen.registered) == (1, 2)  # its registration is still there


def test_a_cold_shutdown_in_a_call_still_stops_the_worker(stack, redis, rng) -> None:
    """RQ's second stop signal (a second after the first) raises SystemExit wherever the
    main thread is: in a one-slot worker's call, the call ends as ambiguous and is recorded
    at once, and the worker stops as asked."""
    with CountingDownstream(delays=[6.0]) as downstream:
        env = {"FULFILMENT_ACTION": downstream.url, "FULFILMENT_TIMEOUT": "8"}
        s, pk = pay(stack, rng, **env, LEASE_SECONDS="60")
        worker = s.start_worker("workers.dispatch.BatchWorker")
        wait_until(lambda: downstream.in_flight.get(pk), what="the call in flight")
        assert worker.proc is not None

        def stopped() -> bool:
            worker.signal(signal.SIGTERM)
            return worker.proc is not None and worker.proc.poll() is not None

        wait_until(stopped, interval=0.2, what="the worker stopped")
        assert worker.proc.returncode == 0 and settled_as(redis, pk, "interrupted")
        assert downstream.calls[pk] == 1
