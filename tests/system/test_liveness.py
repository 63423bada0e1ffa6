"""Every payment ends, or a person is told: a call that outlives its lease, a job that kills
its worker, an action that cannot be loaded, a payment left queued. Real gunicorn, RQ
workers and sweeper; the downstream counts every call and never dedupes."""

import pytest

from ledger import queries
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import payment_key_of, settled_as
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
            assert queries.payment(redis, pk)["token"] == "2"  # type: ignore[index]
        else:  # it may have been applied and cannot be re-run: a person decides
            wait_until(lambda: settled_as(redis, pk, "interrupted"), what="interrupted")
            assert downstream.calls[pk] == 1
            assert "deadline" in queries.payment(redis, pk)["last_error"]  # type: ignore[index]


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
        wait_until(lambda: queries.payment(redis, pk)["state"] != "in_progress", what="swept")  # type: ignore[index]
        if settled_as(redis, pk, final):
            break
    wait_until(lambda: settled_as(redis, pk, final), what=final)
    record = queries.payment(redis, pk)
    assert record is not None
    if replay_safe:
        assert record["token"] == "2" and "worker died" in record["last_error"]
        assert "2 times" in record["last_error"]
    else:  # died during the call: never re-run blindly
        assert (
            record["token"] == "1"
            and "interrupted during the downstream call" in (record["last_error"])
        )
    assert pk in [p["key"] for p in queries.payments(redis, queries.ATTENTION)]
