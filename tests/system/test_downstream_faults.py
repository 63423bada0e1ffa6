"""A downstream that is slow, refuses connections, answers 409 or a gateway error: each
outcome is recorded for what it is (done, retried, or `interrupted` when a non-replay-safe
call may have applied), with real gunicorn, RQ workers and sweeper."""

import orjson
import pytest

from ledger import queries
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import after_sweeps, payment_key_of, settled_as
from tests.support.processes import free_port, wait_until


def pay_once(stack, rng, **env: str) -> str:  # noqa: ANN001
    """Web, worker and sweeper with ``env``; one paid event sent; its payment key."""
    s = stack(**env)
    s.start_web()
    s.start_worker()
    s.start_sweeper()
    event = samples.payment_events(rng)[2]
    s.send(samples.encode(event))
    return payment_key_of(event)


@pytest.mark.parametrize("replay_safe", [True, False])
def test_slow_downstream(replay_safe: bool, stack, redis, rng) -> None:  # noqa: ANN001
    """The first call outlasts FULFILMENT_TIMEOUT: it may have been applied."""
    with CountingDownstream(delays=[2.0]) as downstream:
        pk = pay_once(
            stack,
            rng,
            FULFILMENT_ACTION=downstream.url,
            FULFILMENT_TIMEOUT="0.5",
            FULFILMENT_REPLAY_SAFE=str(replay_safe).lower(),
        )
        state = "fulfilled" if replay_safe else "interrupted"
        wait_until(lambda: settled_as(redis, pk, state))
        assert downstream.calls[pk] == (2 if replay_safe else 1)
        first = queries.payment(redis, pk)["attempts"][0]
        assert "ReadTimeout" in first or "deadline" in first  # whichever of the two fired first


def test_downstream_answering_409_counts_as_done(stack, redis, rng) -> None:  # noqa: ANN001
    with CountingDownstream(default=409) as downstream:
        pk = pay_once(stack, rng, FULFILMENT_ACTION=downstream.url)
        wait_until(lambda: settled_as(redis, pk, "fulfilled"))
        assert orjson.loads(queries.payment(redis, pk)["receipt"])["status"] == 409
        assert downstream.calls[pk] == 1


def test_downstream_refusing_connections_is_retried(stack, redis, rng) -> None:  # noqa: ANN001
    """Nothing listens: the request never left, so even a non-replay-safe action retries."""
    action = f"http://127.0.0.1:{free_port()}/fulfil"
    pk = pay_once(stack, rng, FULFILMENT_ACTION=action, MAX_ATTEMPTS="2")
    wait_until(lambda: settled_as(redis, pk, "failed"))
    record = queries.payment(redis, pk)
    assert record["attempts_started"] == "2" and "ConnectionError" in record["last_error"]


def test_gateway_error_is_ambiguous_for_a_non_replay_safe_action(stack, redis, rng) -> None:  # noqa: ANN001
    with CountingDownstream(default=502) as downstream:
        pk = pay_once(stack, rng, FULFILMENT_ACTION=downstream.url)
        wait_until(lambda: settled_as(redis, pk, "interrupted"))
        after_sweeps(redis)  # nothing may call it again
        assert downstream.calls[pk] == 1
