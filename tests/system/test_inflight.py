"""Many calls in flight per worker process (FULFILMENT_CONCURRENCY), with real gunicorn, real
RQ worker processes, the real HTTP action, a real downstream server and a real sweeper.

One HTTP call whose answer trickles in past its deadline is cut there by the action's
``abort``: it ends alone, and the process and its other calls go on. An action with no
``abort`` (a ``module:function``) that ignores its deadline makes the watchdog end its
process with every other call it had in flight: each of those is a worker that died during
its call, re-run when the action is replay-safe, ``interrupted`` when not, and none is lost
or called twice when it must not be.
"""

import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen
from typing import Any

import pytest
from redis import Redis
from rq import Queue

from ledger import keys
from ledger.read import payments
from tests.support.broken_actions import post_without_abort
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import paid_event, payment_key_of, settled_as, state_of
from tests.support.processes import BIN, RqWorker, spawn, wait_until
from tests.support.stack import ROOMY, Stack

SLOTS = 4


@dataclass
class Spawned:
    proc: Popen


WORKER = "workers.dispatch.BatchWorker"


def send_payments(s, rng, n: int) -> list[str]:
    payments = []
    for _ in range(n):
        event, body = paid_event(rng)
        assert s.send(body).status_code == 200
        payments.append(payment_key_of(event))
    return payments


@pytest.mark.parametrize("worker_class", [WORKER, "workers.inflight.InFlightWorker"])
def test_a_worker_keeps_its_slots_full(stack, redis: Redis, rng, worker_class: str) -> None:
    # Calls of 1 s, long enough that a busy machine still starts SLOTS of them at once.
    with CountingDownstream(delays=[1.0] * 12) as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url, FULFILMENT_CONCURRENCY=str(SLOTS), **ROOMY)
        s.start_web()
        payments = send_payments(s, rng, 12)
        s.start_worker(worker_class)
        wait_until(lambda: all(settled_as(redis, pk, "fulfilled") for pk in payments))
        assert downstream.most_at_once == SLOTS
        assert set(downstream.calls.values()) == {1} and len(downstream.calls) == 12


def stubborn_stack(
    stack: Callable[..., Stack], rng: Any, n: int, replay_safe: bool, **action: str
) -> tuple[Stack, list[str], RqWorker]:
    """The web and the sweeper, ``n`` payments sent, then one worker of SLOTS slots whose
    calls have 3 s each (``action`` names the action): the stack, the payments, the worker."""
    s = stack(
        **action,
        FULFILMENT_REPLAY_SAFE=str(replay_safe).lower(),
        FULFILMENT_CONCURRENCY=str(SLOTS),
        FULFILMENT_TIMEOUT="3",  # the others' 1.5 s calls stay well inside it
        LEASE_SECONDS="5",
    )
    s.start_web()
    payments = send_payments(s, rng, n)
    s.start_sweeper()
    worker = s.start_worker(WORKER)
    assert worker.proc is not None
    return s, payments, worker


def in_progress(redis: Redis, payments: list[str]) -> set[str]:
    return {pk for pk in payments if state_of(redis, pk) == "in_progress"}


@pytest.mark.parametrize("replay_safe", [False, True], ids=["not-replay-safe", "replay-safe"])
def test_one_stubborn_http_call_is_cut_alone_and_its_process_goes_on(
    replay_safe: bool, stack, redis: Redis, rng, tmp_path
) -> None:
    # The first call's answer, its status line first, trickles in over 30 s: past its 3 s
    # deadline and the kill margin. Its slot's abort cuts the connection at the deadline
    # (before, the watchdog ended the process with the calls in flight beside it).
    n = 12
    with CountingDownstream(delays=[1.5] * n * 2, head_trickles=[30.0]) as downstream:
        s, payments, worker = stubborn_stack(
            stack, rng, n, replay_safe, FULFILMENT_ACTION=downstream.url
        )
        wait_until(lambda: len(downstream.bodies) >= 1, what="the first call")
        stubborn = downstream.bodies[0]["payment_key"]
        final = "fulfilled" if replay_safe else "interrupted"
        wait_until(lambda: settled_as(redis, stubborn, final), timeout=60, what=final)
        others = [pk for pk in payments if pk != stubborn]
        wait_until(
            lambda: all(settled_as(redis, pk, "fulfilled") for pk in others),
            timeout=60,
            what="every other payment fulfilled",
        )
        assert worker.proc.poll() is None  # the process went on
        assert "Timeout" not in (tmp_path / "worker.log").read_text(errors="replace")
        assert all(downstream.calls[pk] == 1 for pk in others)  # none of them touched
        assert "deadline" in (redis.hget(keys.payment(stubborn), "attempt:1") or b"").decode()
        assert downstream.calls[stubborn] == (2 if replay_safe else 1)


@pytest.mark.parametrize("replay_safe", [False, True], ids=["not-replay-safe", "replay-safe"])
def test_one_stubborn_call_ends_its_process_and_every_call_in_flight_is_accounted_for(
    replay_safe: bool, stack, redis: Redis, rng, tmp_path
) -> None:
    # An action with no abort (a module:function POSTing to the downstream) whose first
    # call's answer trickles in over 30 s: past its 3 s deadline and the kill margin. The
    # others take 1.5 s, so a second wave of calls is in flight when it dies.
    n = 12
    with CountingDownstream(delays=[1.5] * n * 2, trickles=[30.0]) as downstream:
        s, payments, worker = stubborn_stack(
            stack,
            rng,
            n,
            replay_safe,
            FULFILMENT_ACTION=f"{post_without_abort.__module__}:{post_without_abort.__name__}",
            DOWNSTREAM_URL=downstream.url,
        )
        assert worker.proc.wait(30) == 1  # its watchdog, not a signal
        died_with = in_progress(redis, payments)
        stubborn = downstream.bodies[0]["payment_key"]
        assert stubborn in died_with and len(died_with) >= 2, died_with
        assert "Timeout" in (tmp_path / "worker.log").read_text(errors="replace")

        s.start_worker(WORKER)
        final = "fulfilled" if replay_safe else None
        wait_until(
            lambda: all(
                settled_as(redis, pk, final or "fulfilled")
                or (not final and settled_as(redis, pk, "interrupted"))
                for pk in payments
            ),
            timeout=60,
            what="every payment fulfilled or interrupted",
        )
        interrupted = {pk for pk in payments if state_of(redis, pk) == "interrupted"}
        for pk in died_with:  # each ended by its lease, as a worker that died in its call
            attempt = redis.hget(keys.payment(pk), "attempt:1") or b""
            assert b'"lease_expired"' in attempt, (pk, attempt)
        if replay_safe:
            assert not interrupted
            assert set(downstream.successes) == set(payments)
            called_twice = {pk for pk, n in downstream.calls.items() if n > 1}
            assert called_twice <= died_with and stubborn in called_twice
        else:
            # Not replay-safe: whatever reached the downstream from the dead process waits
            # for a person; whatever had not is re-run; nothing is called twice.
            assert stubborn in interrupted and interrupted <= died_with
            assert set(downstream.calls.values()) == {1}
            assert {pk for pk in payments if pk not in interrupted} <= set(downstream.successes)


def test_the_sqlite_action_keeps_to_one_thread_per_slot(stack, redis: Redis, rng) -> None:
    # SQLite refuses a connection in any thread but the one that opened it: each slot's
    # calls run in the same helper thread every time (workers/deadline.py, Helper). ROOMY:
    # four slots commit to one file, and SQLite waits for the lock 0.8 of the deadline.
    s = stack(FULFILMENT_CONCURRENCY=str(SLOTS), **ROOMY)
    s.start_web()
    payments = send_payments(s, rng, 3 * SLOTS)
    s.start_worker(WORKER)
    wait_until(lambda: all(state_of(redis, pk) in ("fulfilled", "retrying") for pk in payments))
    assert {state_of(redis, pk) for pk in payments} == {"fulfilled"}


def test_the_batch_worker_writes_none_of_rqs_per_job_bookkeeping(stack, redis: Redis, rng) -> None:
    s = stack(FULFILMENT_CONCURRENCY=str(SLOTS))
    s.start_web()
    payments = send_payments(s, rng, 2 * SLOTS)
    s.start_worker(WORKER)
    wait_until(lambda: all(settled_as(redis, pk, "fulfilled") for pk in payments))
    wait_until(lambda: not redis.keys("rq:job:*"), what="finished jobs deleted with a take")
    assert not redis.exists("rq:finished:fulfilment", "rq:started:fulfilment")
    (worker,) = redis.smembers("rq:workers:fulfilment")
    assert redis.hget(worker, "state") == b"idle"  # what ledger/read/stats.py reads


def test_the_batch_worker_serves_every_queue_it_is_given(
    stack, redis: Redis, rng, tmp_path: Path
) -> None:
    # fulfilment-worker QUEUES...: a job of another function on a second queue runs too
    # (RQ's Job.perform), after the fulfilment queue's.
    s = stack(FULFILMENT_CONCURRENCY=str(SLOTS))
    s.start_web()
    payments = send_payments(s, rng, 3)
    ran = tmp_path / "ran"
    Queue("other", connection=redis).enqueue(Path.touch, ran, result_ttl=0)
    argv = [str(BIN / "fulfilment-worker"), "fulfilment", "other"]
    s.parts.add(Spawned(spawn(argv, s.env, tmp_path / "worker.log")))
    wait_until(lambda: all(settled_as(redis, pk, "fulfilled") for pk in payments))
    wait_until(ran.exists, what="the other queue's job run")
    wait_until(lambda: not redis.keys("rq:job:*"), what="finished jobs deleted")


@pytest.mark.parametrize("worker_class", [WORKER, "workers.inflight.InFlightWorker"])
def test_a_stop_request_takes_no_new_job_and_lets_the_calls_in_flight_finish(
    stack, redis: Redis, rng, worker_class: str
) -> None:
    # SIGTERM while every slot is busy and more jobs wait on the queue: the worker must not
    # take another job when a slot frees (a platform's SIGKILL follows its grace period,
    # and a call cut by it ends `interrupted` when the action is not replay-safe).
    n = 2 * SLOTS
    with CountingDownstream(delays=[3.0] * n) as downstream:
        s = stack(
            FULFILMENT_ACTION=downstream.url,
            FULFILMENT_CONCURRENCY=str(SLOTS),
            FULFILMENT_TIMEOUT="5",
            LEASE_SECONDS="8",
        )
        s.start_web()
        payments = send_payments(s, rng, n)
        worker = s.start_worker(worker_class)
        wait_until(lambda: sum(downstream.in_flight.values()) == SLOTS, what="every slot busy")
        worker.signal(signal.SIGTERM)
        assert worker.proc is not None
        assert worker.proc.wait(30) == 0
        called = set(downstream.calls)
        assert len(called) == SLOTS, f"{len(called)} calls after a stop with {SLOTS} in flight"
        assert {pk: state_of(redis, pk) for pk in called} == {pk: "fulfilled" for pk in called}
        assert {state_of(redis, pk) for pk in payments if pk not in called} == {"queued"}
        assert redis.llen("rq:queue:fulfilment") == n - SLOTS


def test_the_sqlite_action_works_on_after_the_worker_started_again_on_a_redis_error(
    stack, redis: Redis, rng, tmp_path: Path
) -> None:
    # fulfilment-worker starts a fresh BatchWorker in the same process when its loop quits
    # on a Redis error (here writes refused for want of replicas, as while Redis fails
    # over): the fresh worker's slot threads must each call SQLite in a thread of their own.
    s = stack(FULFILMENT_CONCURRENCY=str(SLOTS), **ROOMY)
    s.start_web()
    argv = [str(BIN / "fulfilment-worker")]
    s.parts.add(Spawned(spawn(argv, s.env, tmp_path / "worker.log")))
    before = send_payments(s, rng, 2 * SLOTS)
    wait_until(lambda: all(settled_as(redis, pk, "fulfilled") for pk in before))
    start_again(redis, tmp_path / "worker.log")
    after = send_payments(s, rng, 2 * SLOTS)
    wait_until(lambda: all(state_of(redis, pk) not in ("queued", "in_progress") for pk in after))
    errors = {pk: redis.hget(keys.payment(pk), "last_error") for pk in after}
    assert {state_of(redis, pk) for pk in after} == {"fulfilled"}, errors


def start_again(redis: Redis, log: Path) -> None:
    """Writes refused (as while Redis fails over) until fulfilment-worker's loop quits on
    it, then accepted again; returns once a fresh worker has registered."""
    before = redis.smembers("rq:workers:fulfilment")
    refused = loop_quits(log)
    redis.config_set("min-replicas-to-write", 1)
    try:
        wait_until(lambda: loop_quits(log) > refused)
    finally:
        redis.config_set("min-replicas-to-write", 0)
    try:  # a loaded machine: a fresh worker's start may wait on a core
        wait_until(lambda: redis.smembers("rq:workers:fulfilment") - before, timeout=60)
    except AssertionError as exc:  # what the worker said, for whoever reads the failure
        tail = log.read_text(errors="replace").splitlines()[-30:]
        raise AssertionError("no fresh worker in 60 s; its log ends:\n" + "\n".join(tail)) from exc


def loop_quits(log: Path) -> int:
    """The worker loop's quits on a refused write (workers/worker.py work_once's warning), not
    every NOREPLICAS: a slot thread's busy/idle write is refused too, and the loop goes on."""
    lines = log.read_text(errors="replace").splitlines()
    quits = [line for line in lines if line.startswith("WARNING:workers.worker:")]
    return sum("NOREPLICAS" in line for line in quits)


def test_a_worker_started_again_keeps_one_action_and_helper_per_slot(
    stack, redis: Redis, rng, tmp_path: Path
) -> None:
    # Each fresh worker's slot threads are given the slots' actions (each with its Redis
    # client) and helper threads, however many times the worker is started again: the
    # process keeps one of each per slot, not one more per fresh worker.
    s = stack(
        FULFILMENT_ACTION="tests.support.probe_action:slot_state",
        FULFILMENT_CONCURRENCY=str(SLOTS),
    )
    s.start_web()
    log = tmp_path / "worker.log"
    s.parts.add(Spawned(spawn([str(BIN / "fulfilment-worker")], s.env, log)))
    receipts = []
    for restart in range(4):
        if restart:
            start_again(redis, log)
        batch = send_payments(s, rng, 2 * SLOTS)
        wait_until(lambda: all(settled_as(redis, pk, "fulfilled") for pk in batch))  # noqa: B023
        receipts += [getattr(payments.payment(redis, pk), "receipt", {}) for pk in batch]
    assert max(r["contexts"] for r in receipts) == SLOTS, receipts
    assert max(r["helpers"] for r in receipts) == SLOTS, receipts
