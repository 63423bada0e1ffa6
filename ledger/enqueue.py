"""The RQ commands that enqueue one fulfilment job: built by RQ's own code, captured, not sent.

RQ's ``job_id`` does not dedupe (a duplicate id overwrites the job and runs it twice) and
``unique=True`` ignores pipelines, so the ledger, not RQ, decides whether a payment gets a
job. RQ builds the job into a pipeline that is never executed; a ledger script runs the
captured commands only when it moves the payment to ``queued``, atomically with that move.
"""

from dataclasses import dataclass
from typing import Any

from redis import Redis
from rq import Queue

from ledger import limits
from ledger.settings import Settings

FULFIL_JOB = "workers.jobs.fulfil_payment"
"""The function every fulfilment job runs. RQ stores it in each job: renaming it would
strand the jobs already queued."""


@dataclass(frozen=True)
class PreparedJob:
    """One job built, not yet enqueued: its id and the commands that would enqueue it."""

    job_id: str
    commands: list[Any]
    """``(n, arg1..argn)*``, the form the scripts read them in (``run_commands``)."""


NO_JOB = PreparedJob("", [])


class Jobs:
    """Builds fulfilment jobs for the configured queue; one per process."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.queue = Queue(settings.QUEUE_NAME, connection=redis)
        self.settings = settings

    def prepare(self, payment_key: str) -> PreparedJob:
        """A new job for ``fulfil_payment(payment_key)``: RQ's ``create_job``, then its
        ``enqueue_job`` captured on a pipeline that is never sent (a ledger script runs it)."""
        job = self.queue.create_job(
            FULFIL_JOB,
            args=(payment_key,),
            description=f"fulfil {payment_key}",
            timeout=self.settings.job_timeout_s,
            result_ttl=self.settings.RQ_RESULT_TTL,
            failure_ttl=limits.RQ_FAILURE_TTL,
        )
        pipe = self.queue.connection.pipeline(transaction=False)
        self.queue.enqueue_job(job, pipeline=pipe)
        commands: list[Any] = []
        for args, _options in pipe.command_stack:
            commands += [len(args), *args]
        pipe.reset()
        return PreparedJob(job.id, commands)
