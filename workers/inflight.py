"""Many downstream calls in flight per worker process (FULFILMENT_CONCURRENCY).

RQ's SimpleWorker runs one job at a time in its main thread, so a worker process waits out
every call: with a downstream answering in 100 ms it fulfils ten payments a second. This
worker takes a job only when one of its ``FULFILMENT_CONCURRENCY`` slots is free, and runs
each job in a thread of its own, through RQ's own ``perform_job`` (RQ 3 keeps one
execution per job, so a worker may have several). Each job is the same
``workers.jobs.fulfil_payment``: its own lease, fencing token and deadline, its own
context (Redis client, action, liveness key: workers/jobs.py), the gate shared as ever.

A job runs off the main thread, where no SIGALRM reaches it: its call's deadline is the
helper thread of workers/deadline.py, RQ's job timeout ``TimerDeathPenalty``, and the
process's one watchdog ends the process at the first call that will not stop, every call
in flight with it. Each of those is then a worker that died during its call, recovered
by the sweeper once its lease has expired (docs/FULFILMENT.md). A stop request (SIGTERM)
takes no new job and lets the jobs in flight finish; a slot is taken before a job is
dequeued, so no job waits inside the process without a thread. With one slot the worker
is RQ's SimpleWorker, unchanged.
"""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rq.job import Job
from rq.queue import Queue
from rq.timeouts import TimerDeathPenalty
from rq.worker import SimpleWorker, WorkerStatus

from ledger import settings as settings_module

log = logging.getLogger("workers.inflight")

SLOT_WAIT_SECONDS = 5.0
"""While every slot is busy, the worker's heartbeat is renewed this often."""


class InFlightWorker(SimpleWorker):
    """SimpleWorker that keeps up to FULFILMENT_CONCURRENCY jobs in flight, one per thread."""

    def __init__(self, *args: Any, concurrency: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.concurrency = concurrency or settings_module.load().FULFILMENT_CONCURRENCY
        self.slots = threading.BoundedSemaphore(self.concurrency)
        self.pool: ThreadPoolExecutor | None = None
        if self.concurrency > 1:
            # Its threads are named by slot (fulfil_0, ...): the names key each slot's action
            # and helper, kept across fresh workers (workers.deadline.calling_thread).
            self.pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="fulfil")
            self.death_penalty_class = TimerDeathPenalty  # SIGALRM reaches the main thread only

    def dequeue_job_and_maintain_ttl(
        self, timeout: int | None, max_idle_time: int | None = None
    ) -> tuple[Job, Queue] | None:
        if self.pool is None:
            return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
        while not self.slots.acquire(timeout=SLOT_WAIT_SECONDS):
            self.heartbeat()
        if self._stop_requested:  # asked while every slot was busy: no new job
            self.slots.release()
            return None
        try:
            result = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
        except BaseException:
            self.slots.release()
            raise
        if result is None:
            self.slots.release()
        return result

    def execute_job(self, job: Job, queue: Queue) -> None:
        if self.pool is None:
            super().execute_job(job, queue)
            return
        self.pool.submit(self.run_in_slot, job, queue)

    def run_in_slot(self, job: Job, queue: Queue) -> None:
        """One job in a pool thread; its slot is free again when it ends, however."""
        try:
            execution = self.prepare_execution(job)
            self.perform_job(job, queue, execution)
        except Exception:  # RQ's own bookkeeping failed (Redis): the sweeper finds the job
            log.exception("job %s: RQ's bookkeeping failed", job.id)
        finally:
            try:
                if not self.executions:
                    self.set_state(WorkerStatus.IDLE)
            except Exception:  # Redis: it must not take the slot with it
                log.exception("job %s: the worker's idle state not written", job.id)
            finally:
                self.slots.release()

    def teardown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)  # the jobs in flight finish first
        super().teardown()
