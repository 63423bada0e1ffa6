"""The sweeper and a queued payment's RQ job: a job taken off the queue by a worker that
died is found lost and enqueued again, and its hash (RQ gives a queued job no expiry) is
deleted, as is the hash of a job whose attempt's lease expired; a queue longer than
QUEUE_SCAN_CAP is not scanned (LPOS, one job at a time in Redis's main thread, a
cost that grows with the queue): its order tells a lost job, else it waits until the
backlog is shorter; every job's enqueue time is Redis's clock, whatever the clock of the
process that enqueued it."""

import random
from datetime import UTC, datetime, timedelta

import pytest
from redis import Redis

from ledger import keys, limits, settings
from ledger.deliveries import Delivery, Ledger, new_request_id
from ledger.events import classify
from ledger.stored import text
from tests.integration.test_lua_attempts import queued_payment
from tests.support.helpers import paid_event

QUEUE = keys.rq_queue("fulfilment")


def job_of(redis: Redis, pk: str) -> str:
    return text(redis.hget(keys.payment(pk), "job"))


def test_a_job_taken_by_a_worker_that_died_is_enqueued_again_and_its_hash_deleted(
    redis: Redis, redis_server, rng
) -> None:
    attempts, pk = queued_payment(redis_server, rng)
    lost = job_of(redis, pk)
    assert redis.lpop(QUEUE) == lost.encode()  # taken; its worker dies before any lease
    assert redis.hget(keys.RQ_JOB_PREFIX + lost, "status") == b"queued"
    assert attempts.recover(pk) == "requeued"
    new = job_of(redis, pk)
    assert new != lost and redis.lrange(QUEUE, 0, -1) == [new.encode()]
    assert not redis.exists(keys.RQ_JOB_PREFIX + lost)
    assert redis.exists(keys.RQ_JOB_PREFIX + new)


def test_a_queue_longer_than_the_scan_cap_is_taken_to_hold_the_job(
    redis: Redis, redis_server, rng
) -> None:
    attempts, pk = queued_payment(redis_server, rng)
    lost = job_of(redis, pk)
    redis.lrem(QUEUE, 0, lost)
    redis.rpush(QUEUE, *[f"other-{n}" for n in range(limits.QUEUE_SCAN_CAP + 1)])
    assert attempts.recover(pk) == "waiting" and job_of(redis, pk) == lost
    redis.ltrim(QUEUE, 0, limits.QUEUE_SCAN_CAP - 1)  # the backlog is worked down
    assert attempts.recover(pk) == "requeued" and job_of(redis, pk) != lost


def test_a_long_queue_whose_head_came_well_after_the_job_has_not_got_it(
    redis: Redis, redis_server, rng
) -> None:
    """First in, first out: a job enqueued more than the grace before the queue's head was
    taken already. A head within the grace is not proof: taken to hold it."""
    attempts, pk = queued_payment(redis_server, rng)
    lost = job_of(redis, pk)
    redis.lrem(QUEUE, 0, lost)
    mine = datetime.fromisoformat(text(redis.hget(keys.RQ_JOB_PREFIX + lost, "enqueued_at")))
    head, grace = "head-job", attempts.settings.QUEUED_GRACE_SECONDS
    redis.rpush(QUEUE, head, *[f"other-{n}" for n in range(limits.QUEUE_SCAN_CAP)])
    for later, verdict in ((grace - 1, "waiting"), (grace + 2, "requeued")):
        stamp = (mine + timedelta(seconds=later)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        redis.hset(keys.RQ_JOB_PREFIX + head, "enqueued_at", stamp)
        assert attempts.recover(pk) == verdict
    assert job_of(redis, pk) != lost and not redis.exists(keys.RQ_JOB_PREFIX + lost)


def test_a_job_in_the_queue_is_left_waiting(redis: Redis, redis_server, rng) -> None:
    attempts, pk = queued_payment(redis_server, rng)
    job = job_of(redis, pk)
    assert attempts.recover(pk) == "waiting"
    assert job_of(redis, pk) == job and redis.lrange(QUEUE, 0, -1) == [job.encode()]


def test_the_job_of_an_attempt_whose_lease_expired_is_deleted(
    redis: Redis, redis_server, rng
) -> None:
    attempts, pk = queued_payment(redis_server, rng)
    job = job_of(redis, pk)
    assert redis.lpop(QUEUE) == job.encode()
    start = attempts.start(pk, job, replay_safe=False)
    assert attempts.mark_calling(pk, start.token)  # in its call, then its worker dies
    redis.hset(keys.payment(pk), "lease_until", 0)
    assert attempts.recover(pk) == "interrupted"
    assert not redis.exists(keys.RQ_JOB_PREFIX + job)


CLOCK = "wl:test:clock"


@pytest.mark.parametrize(
    "redis_now",
    [
        datetime(2026, 12, 7, 3, 4, 5, 678000, tzinfo=UTC),
        datetime(2024, 2, 29, 23, 59, 59, 999000, tzinfo=UTC),  # a leap day's last ms
        datetime(2000, 3, 1, tzinfo=UTC),  # after a leap day of a year divisible by 400
        datetime(2100, 3, 1, 0, 0, 0, 1000, tzinfo=UTC),  # 2100 has none
        datetime(2027, 1, 1, tzinfo=UTC),
    ],
)
def test_a_job_is_stamped_with_redis_clock_not_its_process(
    redis: Redis, redis_server, redis_now: datetime
) -> None:
    """The scale review: a web process whose clock ran 35 s ahead stamped the job at the
    queue's head, and the sweeper took 1,050 healthy jobs behind it for lost (each enqueued
    again, at the back of the backlog). Every job's enqueued_at is Redis's clock (here the
    scripts' test clock, years from this process's)."""
    s = settings.load(
        {}, REDIS_URL=redis_server.url, STRIPE_WEBHOOK_SECRET="whsec_x", STRIPE_MODE="test"
    )
    redis.set(CLOCK, int(redis_now.timestamp() * 1000))
    event, body = paid_event(random.Random(redis_now.year))
    c = classify(event, s.policy)
    delivery = Delivery(event, body, c, 0, "stripe", new_request_id())
    Ledger(redis, s, clock_key=CLOCK).record_delivery(delivery)
    job = job_of(redis, str(c.payment_key))
    stamp = text(redis.hget(keys.RQ_JOB_PREFIX + job, "enqueued_at"))
    assert stamp == redis_now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
