"""The fulfilment worker's own loop over RQ's queue: jobs taken in batches, each run by
``workers.jobs`` without RQ's per-job bookkeeping.

RQ's worker writes for every job what this service never reads: an execution record, the
started and finished registries, the job's status, times and heartbeats, the worker's
counters and state, each its own round trip (57 commands and 20 round trips a job, most of
them fsynced at ``appendfsync always``). The ledger decides everything (workers/jobs.py);
RQ is the transport that wakes a worker. So this loop takes as many job ids as it has
free slots off the queue in one command (blocking for one when the queue is empty), reads
their jobs in one pipelined round trip, runs each under its own lease, token and deadline
(in the main thread with one slot, as RQ's SimpleWorker did; else in a slot's thread:
workers/inflight.py), and deletes each finished job with the next take. What the service
does read stays true: the worker's registration, heartbeat and busy/idle state
(ledger/read/stats.py), the queue and its jobs' enqueue times, and a job that raised
before its payment was leased is marked ``failed`` for the sweeper's ``job_failures``.
A job taken and never run (its process died) stays ``queued`` outside the queue: the
sweeper re-enqueues it once its payment's grace has passed (recover.lua, "lost job").
"""

import logging
import threading
import time
from typing import Any

from redis.client import Pipeline
from rq.defaults import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT, DEFAULT_RESULT_TTL
from rq.job import Job
from rq.worker import WorkerStatus

from ledger import limits
from ledger.enqueue import FULFIL_JOB
from ledger.stored import text
from workers.inflight import InFlightWorker
from workers.jobs import fulfil

log = logging.getLogger("workers.dispatch")

TAKE_WAIT_SECONDS = 1
"""How long one take waits for a job on an empty queue: a stop request is seen within it."""
HEARTBEAT_SECONDS = 5.0


class BatchWorker(InFlightWorker):
    """Takes up to FULFILMENT_CONCURRENCY jobs at a time and runs them without RQ's
    per-job writes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.finished: list[tuple[str, int]] = []
        """Jobs run to their end and their result TTL, deleted (or kept that long, marked
        ``finished``: RQ_RESULT_TTL) with the next take."""
        self.in_flight = 0
        self.state_lock = threading.Lock()
        """Held while the busy/idle state is written (:meth:`show_state`)."""
        self.state_unwritten = False
        """The last busy/idle write was refused: the next heartbeat writes it again."""
        self.beat_at = 0.0

    def _shutdown(self) -> None:
        """A stop request is seen by the loop within TAKE_WAIT_SECONDS, never raised into
        it: a job taken off the queue is always run."""
        self._stop_requested = True
        self.set_shutdown_requested_date()

    def work(  # RQ's signature; the options this loop has no use for are ignored
        self,
        burst: bool = False,
        logging_level: str | None = "INFO",
        date_format: str = DEFAULT_LOGGING_DATE_FORMAT,
        log_format: str = DEFAULT_LOGGING_FORMAT,
        *args: Any,
        **kwargs: Any,
    ) -> bool:
        self.bootstrap(logging_level, date_format, log_format)
        self._install_signal_handlers()
        self.set_state(WorkerStatus.IDLE)
        ran = 0
        max_jobs = kwargs.get("max_jobs")  # rq worker --max-jobs: end after that many
        try:
            while not self._stop_requested and (max_jobs is None or ran < max_jobs):
                self.maintain()
                free = self.take_slots()
                stopping = self._stop_requested  # asked while every slot was busy: no new job
                wanted = free if max_jobs is None else min(free, max_jobs - ran)
                jobs = [] if stopping else self.take(wanted, block=not burst)
                for _unused in range(free - len(jobs)):
                    self.slots.release()
                if stopping:
                    break
                if not jobs and burst:
                    if self.in_flight == 0:
                        break
                    time.sleep(0.05)  # the last jobs are running
                for job in jobs:
                    self.start(job)
                ran += len(jobs)
        finally:
            self.teardown()
            self.delete_finished()
        return bool(ran)

    def maintain(self) -> None:
        if time.monotonic() - self.beat_at >= HEARTBEAT_SECONDS:
            self.heartbeat()
            if self.state_unwritten:
                self.show_state()
            self.beat_at = time.monotonic()

    def take_slots(self) -> int:
        """Wait for one free slot, then take every other that is free too."""
        while not self.slots.acquire(timeout=HEARTBEAT_SECONDS):
            self.maintain()
        free = 1
        while free < self.concurrency and self.slots.acquire(blocking=False):
            free += 1
        return free

    def take(self, n: int, block: bool) -> list[Job]:
        """Up to ``n`` jobs off the queues, in their order (one command for the first, the
        last batch's finished jobs deleted in the same round trip); their jobs read in one
        more."""
        ids: list[str] = []
        with self.connection.pipeline(transaction=False) as pipe:
            self.delete_finished(pipe)
            pipe.lpop(self.queues[0].key, n)
            ids += [text(i) for i in (pipe.execute()[-1] or [])]
        for queue in self.queues[1:]:
            if len(ids) < n:
                ids += [text(i) for i in (self.connection.lpop(queue.key, n - len(ids)) or [])]
        if not ids and block:
            popped = self.connection.blpop([q.key for q in self.queues], TAKE_WAIT_SECONDS)
            ids = [text(popped[1])] if popped else []
        if not ids:
            return []
        with self.connection.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(Job.key_for(job_id))
            raws = pipe.execute()
        jobs = []
        for job_id, raw in zip(ids, raws, strict=True):
            if not raw:  # deleted meanwhile (by hand, or RQ's cleaning): nothing to run
                continue
            job = Job(job_id, connection=self.connection, serializer=self.serializer)
            job.restore(raw)
            jobs.append(job)
        return jobs

    def delete_finished(self, pipe: Pipeline | None = None) -> None:
        with self.lock:
            done, self.finished = self.finished, []
        target = pipe or self.connection.pipeline(transaction=False)
        for job_id, ttl in done:
            if ttl == 0:
                target.delete(Job.key_for(job_id))
            else:
                target.hset(Job.key_for(job_id), "status", "finished")
                if ttl > 0:  # -1: for ever
                    target.expire(Job.key_for(job_id), ttl)
        if pipe is None and done:
            target.execute()

    def start(self, job: Job) -> None:
        with self.lock:
            self.in_flight += 1
            first = self.in_flight == 1
        if first:
            self.show_state()
        if self.pool is None:
            self.run(job)
        else:
            self.pool.submit(self.run_in_thread, job)

    def run_in_thread(self, job: Job) -> None:
        """:meth:`run` in a pool thread, whose future nothing reads: its errors logged here."""
        try:
            self.run(job)
        except BaseException:
            log.exception("job %s: its end not recorded", job.id)

    def run(self, job: Job) -> None:
        """One job to its end; its slot is free again after, however it ended."""
        entered = time.monotonic()
        try:
            if job.func_name == FULFIL_JOB:
                fulfil(str(job.args[0]), job.id, job.timeout, entered)
            else:  # another function on this queue: RQ's own way
                job.perform()
            with self.lock:
                ttl = job.result_ttl
                self.finished.append((job.id, DEFAULT_RESULT_TTL if ttl is None else ttl))
        except Exception:
            log.exception("job %s raised", job.id)
            with job.connection.pipeline(transaction=False) as pipe:  # the sweeper counts it
                pipe.hset(job.key, "status", "failed")
                pipe.expire(job.key, limits.RQ_FAILURE_TTL)
                pipe.execute()
        finally:
            with self.lock:
                self.in_flight -= 1
                last = self.in_flight == 0
            try:
                if last:
                    self.show_state()
            finally:  # a Redis error above must not take the slot with it
                self.slots.release()

    def show_state(self) -> None:
        """Busy or idle, as the count of jobs in flight is when written: called on each turn
        between none and one, one writer at a time, so an ending job's idle never lands after
        the next job's busy (the worker would be shown idle while that job runs)."""
        with self.state_lock:
            with self.lock:
                busy = self.in_flight > 0
            self.state_unwritten = True
            self.set_state(WorkerStatus.BUSY if busy else WorkerStatus.IDLE)
            self.state_unwritten = False
