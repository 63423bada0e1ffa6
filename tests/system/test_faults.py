"""The fault matrix: each cell a real fault in real processes, with the outcome the README
promises. Expected outcomes are tabled in docs/RELIABILITY.md."""

import signal
import threading

import pytest
import requests
from redis import Redis

from ledger import keys
from ledger.clock import now_ms
from ledger.downstream import read_downstream
from ledger.read import payments
from ledgerctl import samples
from ledgerctl.checker import check
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import (
    after_sweeps,
    payment_key_of,
    post_webhook,
    settled_as,
    state_of,
    watching_sweeper,
)
from tests.support.processes import (
    children,
    wait_until,
)

# point -> action -> (final state, downstream calls, effects when the downstream records them)
JOB_FAULTS = {
    "after_lease": {"sqlite": ("fulfilled", 1, 1), "http": ("fulfilled", 1, None)},
    "before_action": {"sqlite": ("fulfilled", 1, 1), "http": ("interrupted", 0, None)},
    "after_action": {"sqlite": ("fulfilled", 2, 1), "http": ("interrupted", 1, None)},
    "during_record": {"sqlite": ("fulfilled", 1, 1), "http": ("fulfilled", 1, None)},
}


def calls_and_effects(
    action: str, config: dict, downstream: CountingDownstream, pk: str
) -> tuple[int, int | None]:
    if action == "http":
        return downstream.calls[pk], None
    row = read_downstream(str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))[
        "payments"
    ].get(pk, {})
    return row.get("calls", 0), row.get("effects", 0)


def action_env(action: str, downstream: CountingDownstream) -> dict[str, str]:
    return {"FULFILMENT_ACTION": downstream.url} if action == "http" else {}


# RQ's SimpleWorker, and fulfilment-worker's own loop with calls in flight in threads.
WORKERS = {
    "simple": ("rq.worker.SimpleWorker", "1"),
    "batch": ("workers.dispatch.BatchWorker", "4"),
}


@pytest.mark.parametrize("worker", list(WORKERS))
@pytest.mark.parametrize("action", ["sqlite", "http"])
@pytest.mark.parametrize("point", list(JOB_FAULTS))
def test_job_killed_at_fault_point(
    point: str, action: str, worker: str, stack, redis, config, rng
) -> None:
    worker_class, slots = WORKERS[worker]
    with CountingDownstream() as downstream:
        s = stack(**action_env(action, downstream), FULFILMENT_CONCURRENCY=slots)
        s.start_web()
        event = samples.payment_events(rng)[2]
        assert s.send(samples.encode(event)).status_code == 200
        doomed = s.start_worker(worker_class, FAULTPOINT=point)
        assert doomed.proc is not None and doomed.proc.wait(20) == -signal.SIGKILL
        s.start_worker(worker_class)
        s.start_sweeper()
        state, calls, effects = JOB_FAULTS[point][action]
        pk = payment_key_of(event)
        wait_until(lambda: settled_as(redis, pk, state), what=f"{pk} {state}")
        after_sweeps(redis)  # further sweeps must not change anything
        assert state_of(redis, pk) == state
        assert calls_and_effects(action, config, downstream, pk) == (calls, effects)


@pytest.mark.parametrize("action", ["sqlite", "http"])
@pytest.mark.parametrize("point", ["receiver_after_verify", "receiver_after_record"])
def test_web_killed_at_fault_point(point: str, action: str, stack, redis, config, rng) -> None:
    with CountingDownstream() as downstream:
        s = stack(**action_env(action, downstream))
        s.start_web(FAULTPOINT=point)
        event = samples.payment_events(rng)[2]
        body = samples.encode(event)
        with pytest.raises(requests.ConnectionError):
            s.send(body)  # no answer: Stripe would retry
        s.start_web()
        assert s.send(body).status_code == 200  # the retry
        s.start_worker()
        wait_until(lambda: settled_as(redis, payment_key_of(event), "fulfilled"))
        recorded = int(redis.hget(keys.event(event["id"]), "n"))
        assert recorded == (1 if point == "receiver_after_verify" else 2)
        found = check(
            {event["id"]: 1},
            {event["id"]: recorded},
            {payment_key_of(event)},
            {payment_key_of(event): 1},
            {},
        )
        assert found.ok
        assert calls_and_effects(action, config, downstream, payment_key_of(event))[0] == 1


@pytest.mark.parametrize("action", ["sqlite", "http"])
def test_sweeper_killed_mid_scan(action: str, stack, redis, config, rng) -> None:
    with CountingDownstream() as downstream:
        s = stack(**action_env(action, downstream))
        s.start_web()
        events = [samples.payment_events(rng)[2] for _ in range(3)]
        for event in events:
            s.send(samples.encode(event))
        redis.delete("rq:queue:fulfilment")  # the jobs are lost
        for event in events:
            redis.zadd(keys.DUE, {payment_key_of(event): 0})
        doomed = s.start_sweeper(FAULTPOINT="sweeper_mid_scan")
        assert doomed.proc is not None and doomed.log is not None
        # The sweep runs in a child of the process started (workers/supervise.py): the
        # child is killed mid-scan, then the whole sweeper goes before its next child.
        killed = f"exit code {128 + signal.SIGKILL}"
        wait_until(lambda: killed in doomed.log.read_text(), 20, what="the sweep killed")
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(20)
        assert sorted(state_of(redis, payment_key_of(e)) for e in events) == ["queued"] * 3
        assert 1 <= redis.llen("rq:queue:fulfilment") < 3  # re-enqueued before each kill
        s.start_sweeper()
        s.start_worker()
        for event in events:
            wait_until(lambda e=event: settled_as(redis, payment_key_of(e), "fulfilled"))
            assert calls_and_effects(action, config, downstream, payment_key_of(event))[0] == 1


@pytest.mark.parametrize("worker", list(WORKERS))
@pytest.mark.parametrize("action", ["sqlite", "http"])
def test_worker_sleeping_past_its_lease(
    action: str, worker: str, stack, redis, config, rng
) -> None:
    """The worker stalls after fencing its call, its lease expires, then it wakes up: past
    the call's window it must not call any more (a person or another worker may act)."""
    worker_class, slots = WORKERS[worker]
    with CountingDownstream() as downstream:
        s = stack(**action_env(action, downstream), FULFILMENT_CONCURRENCY=slots)
        s.start_web()
        watching_sweeper(s, redis)
        event = samples.payment_events(rng)[2]
        pk = payment_key_of(event)
        s.send(samples.encode(event))
        s.start_worker(worker_class, FAULTPOINT="before_action:sleep:5")
        wait_until(lambda: state_of(redis, pk) == "in_progress")
        s.start_worker(worker_class)
        if action == "sqlite":  # replay-safe: a second worker re-runs it with the same key
            wait_until(
                lambda: redis.hget(keys.payment(pk), "stale_finishes") == b"1", what="stale finish"
            )
            # The stalled worker's word may come before the second worker's call (a loaded
            # machine): the lease expired, the payment waits for its retry, and the word is stale.
            wait_until(lambda: settled_as(redis, pk, "fulfilled"), what="re-run by the second")
            assert calls_and_effects(action, config, downstream, pk) == (1, 1)
        else:  # not replay-safe: interrupted, then its worker's "not called" lifts that
            wait_until(lambda: settled_as(redis, pk, "fulfilled"), what="re-run after not_called")
            assert calls_and_effects(action, config, downstream, pk) == (1, None)
        record = payments.payment(redis, pk)
        assert record is not None
        first = record.attempts[0]
        assert "not_called" in (first.outcome, first.stale_outcome)
        assert state_of(redis, pk) == "fulfilled"


def test_whole_forking_rq_worker_killed_mid_job(stack, redis, rng) -> None:
    """RQ's trap: the killed worker's work-horse runs on. The ledger keeps it to one effect."""
    with CountingDownstream() as downstream:
        gate = downstream.hold_first_call()
        s = stack(FULFILMENT_ACTION=downstream.url, FULFILMENT_TIMEOUT="3", LEASE_SECONDS="5")
        s.start_web()
        event = samples.payment_events(rng)[2]
        pk = payment_key_of(event)
        s.send(samples.encode(event))
        parent = s.start_worker(worker_class="rq.worker.Worker")
        wait_until(lambda: downstream.calls[pk] == 1, what="call in flight")
        assert parent.proc is not None
        horses = children(parent.proc.pid)
        parent.proc.send_signal(signal.SIGKILL)
        parent.proc.wait(10)
        gate.set()
        wait_until(lambda: settled_as(redis, pk, "fulfilled"), what="orphaned horse finishes")
        s.start_worker()
        s.start_sweeper()
        lease_ms = 5000
        wait_until(lambda: now_ms(redis) > fulfilled_ms(redis, pk) + lease_ms, what="a lease")
        after_sweeps(redis)  # a whole lease later: nothing may run it again
        assert downstream.calls[pk] == 1 and state_of(redis, pk) == "fulfilled"
        assert horses, "the forking worker had a work-horse"


def test_gunicorn_worker_killed_mid_request(stack, redis, rng) -> None:
    s = stack()
    web = s.start_web(FAULTPOINT="receiver_after_verify:sleep:5")
    assert web.log is not None
    web_log = web.log
    event = samples.payment_events(rng)[2]
    body = samples.encode(event)
    outcome: list[object] = []
    sender = threading.Thread(target=lambda: outcome.append(post_webhook(web.url, body)))
    sender.start()
    wait_until(lambda: "fault point receiver_after_verify" in web_log.read_text(), what="in view")
    assert web.proc is not None
    for pid in children(web.proc.pid):
        import os

        os.kill(pid, signal.SIGKILL)
    sender.join(20)
    assert outcome and outcome[0] != 200  # never acknowledged
    assert redis.hget(keys.event(event["id"]), "n") is None
    s.start_web()
    assert s.send(body).status_code == 200
    assert redis.hget(keys.event(event["id"]), "n") == b"1"


def fulfilled_ms(redis: Redis, pk: str) -> int:
    return int(redis.hget(keys.payment(pk), "fulfilled_at") or 0)
