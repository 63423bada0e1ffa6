"""A forward step of Redis's clock must not end a lease whose call may still run.

A lease ends by Redis's wall clock (TIME in the scripts, ``lease_until``), its call by the
worker's monotonic clock (workers/deadline.py). Here Redis's clock is the scripts' test clock
(keys.lua_constants), stepped by hand, and the sweeper's monotonic clock is moved by hand:
the real scripts, the real sweeper pass, the real decisions."""

import random
from datetime import UTC, datetime

import pytest
from redis import Redis

from ledger import settings
from ledger.attempts import Attempts
from ledger.clock import StepWatch
from ledger.decisions import decide
from ledger.deliveries import Delivery, Ledger, new_request_id
from ledger.events import classify
from ledger.health import health
from ledger.read.base import Problem
from ledgerctl import samples
from tests.support.helpers import state_of
from workers.sweeper import sweep_once

CLOCK = "wl:test:clock"
START_MS = 1_800_000_000_000


class Ticks:
    """The sweeper's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.s = 5000.0

    def __call__(self) -> float:
        return self.s


class Clocks:
    """Redis's clock (the scripts' test clock) and the sweeper's, and a sweeper watching."""

    def __init__(self, redis: Redis, s: settings.Settings) -> None:
        self.redis = redis
        self.ticks = Ticks()
        redis.set(CLOCK, START_MS)
        self.watch = StepWatch(
            s.LEASE_SECONDS,
            s.FULFILMENT_KILL_MARGIN_SECONDS / 2,
            lambda: int(redis.get(CLOCK) or 0),
            self.ticks,
        )

    def redis_ms(self) -> int:
        return int(self.redis.get(CLOCK) or 0)

    def both_run(self, seconds: float) -> None:
        self.redis.incrby(CLOCK, int(seconds * 1000))
        self.ticks.s += seconds

    def redis_steps(self, seconds: float) -> None:
        """Redis's clock jumps ahead; 0.1 s passes for everyone else."""
        self.redis.incrby(CLOCK, int(seconds * 1000) + 100)
        self.ticks.s += 0.1


@pytest.fixture
def ledger(redis: Redis, redis_server) -> tuple[Ledger, Attempts]:
    s = settings.load(
        {}, REDIS_URL=redis_server.url, STRIPE_WEBHOOK_SECRET="whsec_x", STRIPE_MODE="test"
    )
    client = Redis.from_url(s.REDIS_URL)
    return Ledger(client, s, clock_key=CLOCK), Attempts(client, s, clock_key=CLOCK)


def in_call(ledger: tuple[Ledger, Attempts], rng: random.Random) -> tuple[str, int]:
    """A paid payment whose worker has passed its fence: its call is running."""
    record, attempts = ledger
    event = samples.payment_events(rng)[2]
    c = classify(event, record.settings.policy)
    record.record_delivery(
        Delivery(event, samples.encode(event), c, "test", "stripe", new_request_id())
    )
    pk = str(c.payment_key)
    start = attempts.start(pk, "job-1", replay_safe=False)
    assert attempts.mark_calling(pk, start.token)
    return pk, start.token


def test_a_forward_step_of_redis_clock_does_not_end_a_call_in_flight(
    ledger, redis: Redis, rng
) -> None:
    """Redis's clock steps a lease ahead while a non-replay-safe call runs: neither the
    sweeper nor another job ends the lease, so no person can run the payment again while
    the call runs. Before, the sweeper made it `interrupted` (and another job's start did)
    and a person's retry was accepted (the call's liveness key names the lease's end, which
    Redis's clock had passed): the downstream was called twice."""
    _, attempts = ledger
    clocks = Clocks(redis, attempts.settings)
    lease_s = attempts.settings.LEASE_SECONDS
    sweep_once(attempts, clocks.watch)
    clocks.both_run(lease_s + 1)  # the watch has watched for a lease
    sweep_once(attempts, clocks.watch)
    pk, token = in_call(ledger, rng)

    clocks.redis_steps(lease_s + 1)
    done = sweep_once(attempts, clocks.watch)
    assert done["clock_stepped"] == 1 and done["clock"] == 1
    assert state_of(redis, pk) == "in_progress"
    assert health(redis, datetime.now(UTC)).clock_steps == 1  # /metrics: clock_steps_total
    refused = decide(attempts, pk, "resolve", "retry", "person")
    assert isinstance(refused, Problem) and refused.error == "refused"
    # Nor does another job of the payment (RQ's, or one the sweeper re-enqueued) take over.
    other_job = attempts.start(pk, "job-2", replay_safe=False)
    assert (other_job.verdict, other_job.reason) == ("skip", "lease_expired")
    assert state_of(redis, pk) == "in_progress"
    clocks.both_run(1)
    assert sweep_once(attempts, clocks.watch)["clock"] == 1  # still within the hold

    # The call ends (its watchdog ends it within its lease, on the worker's own clock).
    assert attempts.finish(pk, token, "fulfilled", "{}", 5.0) == ("fulfilled", "fulfilled")


def test_a_lease_ends_once_the_sweeper_has_watched_for_a_lease(ledger, redis: Redis, rng) -> None:
    """A watch that has just started, or has just seen a step, ends no lease for a lease;
    then a lease whose worker died ends as before."""
    _, attempts = ledger
    clocks = Clocks(redis, attempts.settings)
    lease_s = attempts.settings.LEASE_SECONDS
    pk, _ = in_call(ledger, rng)  # its worker dies in the call
    clocks.both_run(lease_s + 1)
    assert state_of(redis, pk) == "in_progress"
    # The watch was made a lease ago, but has read Redis's clock only now.
    assert sweep_once(attempts, clocks.watch)["clock"] == 1
    clocks.both_run(lease_s)
    assert sweep_once(attempts, clocks.watch)["interrupted"] == 1

    other, _ = in_call(ledger, rng)
    clocks.redis_steps(lease_s + 1)
    assert sweep_once(attempts, clocks.watch)["clock"] == 1
    clocks.both_run(lease_s + 1)
    assert sweep_once(attempts, clocks.watch)["interrupted"] == 1
    assert state_of(redis, other) == "interrupted"


def test_a_step_after_the_sweeper_read_the_clock_is_seen_by_the_script(
    ledger, redis: Redis, rng
) -> None:
    """Redis's clock steps between the sweeper's reading and its recover call: the script
    finds Redis's clock past what the sweeper vouched for, and does not end the lease."""
    _, attempts = ledger
    clocks = Clocks(redis, attempts.settings)
    clocks.watch.read()
    clocks.both_run(attempts.settings.LEASE_SECONDS + 1)
    clocks.watch.read()
    pk, _ = in_call(ledger, rng)
    clocks.redis_steps(attempts.settings.LEASE_SECONDS + 1)  # after the sweeper's reading
    assert attempts.recover(pk, trusted_until_ms=clocks.watch.trusted_until_ms()) == "clock"
    assert state_of(redis, pk) == "in_progress"
