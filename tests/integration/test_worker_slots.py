"""A worker with many slots frees a job's slot after the job however its end went: a Redis
error while the worker writes its own idle state (refused here because its hash was turned
into a string, as a write is refused when Redis fails under it) must not take the slot with
it, silently, in a pool thread. With every slot lost the worker would heartbeat on and take
no job, and nothing would say why. (With one slot the error reaches the worker's loop, which
ends and is started again: workers/worker.py.)"""

import logging
import threading
from typing import Any

import pytest
from redis import Redis
from redis.exceptions import ResponseError
from rq import Queue
from rq.worker import WorkerStatus

from tests.support.processes import RedisServer, wait_until
from workers.dispatch import BatchWorker
from workers.inflight import InFlightWorker

SLOTS = 2


def spoil(key: str, url: str) -> None:
    """The job: the worker's hash becomes a string, so the worker's next write to it fails."""
    redis = Redis.from_url(url)
    redis.delete(key)
    redis.set(key, "spoiled")


def test_a_redis_error_after_a_batch_job_keeps_its_slot_and_is_logged(
    redis: Redis, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    queue = Queue("fulfilment", connection=redis)
    worker = BatchWorker([queue], connection=redis, concurrency=SLOTS)
    worker.register_birth()
    queue.enqueue(spoil, worker.key, redis_server.url, result_ttl=0)
    (job,) = worker.take(1, block=False)
    assert worker.slots.acquire(blocking=False)
    with caplog.at_level(logging.WARNING):
        worker.start(job)
        assert worker.pool is not None
        worker.pool.shutdown(wait=True)
    assert worker.in_flight == 0 and redis.get(worker.key) == b"spoiled"
    assert sum(worker.slots.acquire(blocking=False) for _ in range(SLOTS)) == SLOTS
    assert "WRONGTYPE" in caplog.text


def test_a_redis_error_after_an_rq_job_keeps_its_slot_and_is_logged(
    redis: Redis, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    queue = Queue("fulfilment", connection=redis)
    worker = InFlightWorker([queue], connection=redis, concurrency=SLOTS)
    worker.register_birth()
    worker.set_state(WorkerStatus.BUSY)
    job = queue.enqueue(spoil, worker.key, redis_server.url, result_ttl=0)
    assert worker.slots.acquire(blocking=False)
    with caplog.at_level(logging.WARNING):
        worker.execute_job(job, queue)
        assert worker.pool is not None
        worker.pool.shutdown(wait=True)
    assert sum(worker.slots.acquire(blocking=False) for _ in range(SLOTS)) == SLOTS
    assert "WRONGTYPE" in caplog.text


class HeldIdle(BatchWorker):
    """Holds a finishing job's idle write until the next job is in flight: the order in which
    the two writes can reach Redis when the last job ends as the next one starts."""

    held = idle_written = False

    def set_state(self, state: str, pipeline: Any = None) -> None:
        in_pool = threading.current_thread() is not threading.main_thread()
        if state == WorkerStatus.IDLE and in_pool and not self.held:
            self.held = True
            wait_until(lambda: self.in_flight == 1, what="the next job in flight")
            super().set_state(state, pipeline)
            self.idle_written = True
            return
        super().set_state(state, pipeline)


def test_a_job_ending_as_the_next_starts_leaves_the_worker_busy(redis: Redis) -> None:
    """Before, the ending job's idle could land after the next job's busy, and the worker
    showed idle (dashboard, `webhook_workers_busy`) for as long as that job ran."""
    queue = Queue("fulfilment", connection=redis)
    worker = HeldIdle([queue], connection=redis, concurrency=SLOTS)
    worker.register_birth()
    for seconds in (0, 2):
        queue.enqueue("time.sleep", seconds, result_ttl=0)
        (job,) = worker.take(1, block=False)
        assert worker.slots.acquire(blocking=False)
        worker.start(job)
        wait_until(lambda: worker.held, what="the first job's idle write held")
    wait_until(lambda: worker.idle_written, what="the idle write")
    assert worker.in_flight == 1 and redis.hget(worker.key, "state") == b"busy"
    assert worker.pool is not None
    worker.pool.shutdown(wait=True)
    assert redis.hget(worker.key, "state") == b"idle"


class RefusedIdle(BatchWorker):
    """Its first idle write from a slot thread is refused, as while Redis fails over."""

    refused = False

    def set_state(self, state: str, pipeline: Any = None) -> None:
        in_pool = threading.current_thread() is not threading.main_thread()
        if state == WorkerStatus.IDLE and in_pool and not self.refused:
            self.refused = True
            raise ResponseError("NOREPLICAS Not enough good replicas to write.")
        super().set_state(state, pipeline)


def test_an_idle_state_refused_in_a_slot_thread_is_written_at_the_next_heartbeat(
    redis: Redis,
) -> None:
    """The refusal never reaches the worker's loop (it is in a slot thread), so the loop goes
    on; before, the worker stayed shown busy (dashboard, `webhook_workers_busy`) until its
    next job."""
    queue = Queue("fulfilment", connection=redis)
    worker = RefusedIdle([queue], connection=redis, concurrency=SLOTS)
    worker.register_birth()
    queue.enqueue("time.sleep", 0, result_ttl=0)
    (job,) = worker.take(1, block=False)
    assert worker.slots.acquire(blocking=False)
    worker.start(job)
    assert worker.pool is not None
    worker.pool.shutdown(wait=True)
    assert worker.refused and redis.hget(worker.key, "state") == b"busy"
    worker.maintain()
    assert redis.hget(worker.key, "state") == b"idle"
