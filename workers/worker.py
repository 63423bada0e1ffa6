"""``fulfilment-worker``: the BatchWorker (workers/dispatch.py) on the ledger's own
connection (REDIS_URL, or the primary found through REDIS_SENTINELS), working on after
Redis fails over under it.

The worker's loop quits on a Redis error: a take sent to a primary that just died, a
demoted primary releasing a blocked pop (``UNBLOCKED``), a write refused for want of
replicas (``NOREPLICAS``). This process then starts a fresh worker on the same client,
whose next connection asks the Sentinels again. The worker runs in a child process, started again
when it ends unasked (its watchdog ends it when a call will not stop): workers/supervise.py.
``rq worker -w workers.dispatch.BatchWorker -c workers.rq_config`` is the same worker
without either loop (``-w rq.worker.SimpleWorker``: RQ's own, one job at a time); both check the
settings and resolve the fulfilment action before they start (workers/actions.py
``settings_or_exit``).
"""

import logging
import signal
import sys
import time
from types import FrameType

import click
from redis import Redis
from redis.exceptions import RedisError
from rq import Queue
from rq.exceptions import StopRequested

from ledger.connection import connect
from ledger.redact import redact
from ledger.settings import Settings
from workers.actions import settings_or_exit
from workers.dispatch import BatchWorker
from workers.supervise import supervise

log = logging.getLogger("workers.worker")

WORKER_TTL = 20
"""RQ's worker TTL: a pop waits 5 s and RQ's own socket timeout is 15 s (RQ sets both from
it), so a worker waiting on a primary that froze finds the new one within ~15 s instead of
RQ's default 7 minutes."""

RESTART_SECONDS = 1.0
"""Pause before a fresh worker after RQ's loop quit on a Redis error."""


class Worker(BatchWorker):
    """BatchWorker (FULFILMENT_CONCURRENCY jobs at a time, without RQ's per-job writes:
    workers/dispatch.py) that remembers a stop request (SIGINT, SIGTERM) across Redis
    errors."""

    stop_requested = False

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested = True
        super().request_stop(signum, frame)


def work_once(redis: Redis, queue_names: tuple[str, ...], burst: bool) -> bool:
    """One RQ worker's life; True when it ended for good (a stop request, burst done)."""
    worker: Worker | None = None
    try:
        worker = Worker(
            [Queue(name, connection=redis) for name in queue_names],
            connection=redis,
            worker_ttl=WORKER_TTL,
        )
        worker.work(burst=burst, logging_level="INFO")
    except (RedisError, StopRequested) as exc:  # at its start, or in its teardown
        log.warning("worker: %s", redact(str(exc)) or type(exc).__name__)
        if worker is not None and worker.pubsub_thread is not None:
            worker.pubsub_thread.stop()  # left running when the teardown failed
    return burst or (worker is not None and worker.stop_requested)


def pause() -> None:
    """Between two workers nothing runs: a stop signal ends the process at once."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    time.sleep(RESTART_SECONDS)


@click.command()
@click.argument("queues", nargs=-1)
@click.option("--burst", is_flag=True, help="Quit once the queues are empty.")
def main(queues: tuple[str, ...], burst: bool) -> None:
    """Work the fulfilment queue (QUEUE_NAME, or QUEUES) until stopped."""
    logging.basicConfig(level=logging.INFO)
    # stripe-python logs each request, and Stripe's error text quoting the key, at INFO.
    logging.getLogger("stripe").setLevel(logging.WARNING)
    s = settings_or_exit()  # once, here: a wrong setting is not worth a restart
    sys.exit(supervise("fulfilment-worker", lambda: work(s, queues or (s.QUEUE_NAME,), burst)))


def work(s: Settings, queue_names: tuple[str, ...], burst: bool) -> int:
    """The supervised process: workers one after another until stopped (or burst done)."""
    redis = connect(s)  # RQ's own; the jobs build theirs (workers.jobs.context)
    while not work_once(redis, queue_names, burst):
        pause()
    return 0


if __name__ == "__main__":
    main()
