"""FULFILMENT_MAX_RATE with real gunicorn, several RQ workers and the sweeper: a backlog
released at once (a resume after a pause) reaches the downstream at no more than the limit
in any one-second window, and each payment is fulfilled once; a job's wait for a slot never
gets it killed."""

import requests
from rq.registry import FailedJobRegistry

from ledger import keys
from tests.support.constants import BEARER
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import cli_ok, paid_event, payment_key_of, run_cli, state_of
from tests.support.processes import wait_until

LIMIT = 10
WORKERS = 3
CONTENDING_WORKERS = 6


def busiest_second(arrivals: list[float]) -> int:
    """The most calls that arrived within any one-second window."""
    times = sorted(arrivals)
    return max((sum(1 for t in times[i:] if t < start + 1.0) for i, start in enumerate(times)))


def test_a_released_backlog_never_exceeds_the_rate(stack, redis, config, rng) -> None:
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url, FULFILMENT_MAX_RATE=str(LIMIT))
        web = s.start_service(WORKERS)
        assert cli_ok(run_cli(config, "fulfilment", "pause", "--reason", "build a backlog"))
        events = [paid_event(rng) for _ in range(80)]
        for _, body in events:
            assert s.send(body).status_code == 200
        payments = [payment_key_of(event) for event, _ in events]
        wait_until(lambda: redis.zcard(keys.waiting("paused")) == 80, timeout=60)
        scraped = requests.get(f"{web.url}/metrics", headers=BEARER, timeout=10).text
        assert f"webhook_fulfilment_max_rate {LIMIT}.0" in scraped
        assert 'webhook_fulfilment_waiting{reason="paused"} 80.0' in scraped
        assert cli_ok(run_cli(config, "fulfilment", "resume"))
        wait_until(lambda: all(state_of(redis, pk) == "fulfilled" for pk in payments), timeout=90)
        assert {pk: downstream.successes[pk] for pk in payments} == {pk: 1 for pk in payments}
        arrivals = [at for at, _, _ in downstream.answered]
        assert len(arrivals) == 80
        # admitted at most LIMIT per second in Redis; one call per worker may be in flight
        assert busiest_second(arrivals) <= LIMIT + WORKERS


def test_a_long_wait_for_a_slot_never_gets_the_job_killed(stack, redis, rng) -> None:
    """A job waits at the gate for a slot up to RATE_WAIT_SECONDS (10 s); RQ's timeout of the
    job was LEASE_SECONDS + FULFILMENT_TIMEOUT + 5 = 9 s, so a job that lost the race for a
    slot nine times was killed in its sleep (no call, no attempt) and counted against the
    payment: with MAX_ATTEMPTS=2, failed with 0 calls. Now the wait is part of the timeout."""
    with CountingDownstream() as downstream:
        s = stack(
            FULFILMENT_ACTION=downstream.url,
            FULFILMENT_MAX_RATE="1",
            LEASE_SECONDS="3",
            FULFILMENT_TIMEOUT="1",
            MAX_ATTEMPTS="2",
        )
        s.start_web()
        for _ in range(CONTENDING_WORKERS):
            s.start_worker()
        s.start_sweeper()
        events = [paid_event(rng) for _ in range(40)]
        for _, body in events:
            assert s.send(body).status_code == 200
        payments = [payment_key_of(event) for event, _ in events]

        def settled() -> bool:
            return all(state_of(redis, pk) in ("fulfilled", "failed") for pk in payments)

        wait_until(settled, timeout=150, what="every payment fulfilled or failed")
        killed = FailedJobRegistry("fulfilment", connection=redis).get_job_ids()
        states = {pk: state_of(redis, pk) for pk in payments}
        assert killed == [] and set(states.values()) == {"fulfilled"}, (killed, states)
        assert {pk: downstream.successes[pk] for pk in payments} == {pk: 1 for pk in payments}
