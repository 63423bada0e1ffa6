"""Every payment ends, or a person is told: a call that outlives its lease, a job that kills
its worker, an action that cannot be loaded, a payment left queued; and the workers counted
alive are the ones alive. Real gunicorn, RQ workers and sweeper; the downstream counts every
call and never dedupes."""

import signal

import pytest

from ledger import settings
from ledger.read import payments, stats
from ledger.read.stats import Workers
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import payment_key_of, settled_as, state_of
from tests.support.processes import wait_until


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
    """200 at once, then the body a byte at a time for 6 s (lease 3 s, deadline 1 s)."""
    with CountingDownstream(trickles=[6.0]) as downstream:
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
