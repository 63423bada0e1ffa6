"""The RQ commands that enqueue one fulfilment job: built by RQ's own code, captured, not sent.

RQ's ``job_id`` does not dedupe (a duplicate id overwrites the job and runs it twice) and
``unique=True`` ignores pipelines, so the ledger, not RQ, decides whether a payment gets a
job. RQ builds the job into a pipeline that is never executed; a ledger script runs the
captured commands only when it moves the payment to ``queued``, atomically with that move.

Every paid delivery offers a job (the script runs it for the payment's first), and RQ's
building one cost about a tenth of the web process's CPU a delivery. So each process has
RQ build one job, keeps its commands as a pattern, and fills in what differs from job to
job: the id, the two timestamps, the payment key's description and the data (the call,
serialized by the queue's own serializer, compressed as RQ stores it). The pattern is used
only when it gives, for a second payment key, exactly the commands RQ itself builds;
otherwise (another RQ) RQ builds every job.
"""

import datetime
import logging
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis import Redis
from rq import Queue
from rq.utils import utcformat

from ledger import keys, limits
from ledger.settings import Settings

log = logging.getLogger(__name__)

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

Filler = Callable[[str, str, str], list[Any]]


class Jobs:
    """Builds fulfilment jobs for the configured queue; one per process."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.queue = Queue(settings.QUEUE_NAME, connection=redis)
        self.settings = settings
        self._fill: Filler | None = None
        self._checked = False

    @property
    def patterned(self) -> bool:
        """Whether jobs are filled in from RQ's pattern (known from the first job on)."""
        return self._fill is not None

    def prepare(self, payment_key: str) -> PreparedJob:
        """A new job for ``fulfil_payment(payment_key)``, enqueued by the commands returned."""
        if not self._checked:  # not at start: RQ asks the server its version
            self._fill = self._pattern()
            self._checked = True
        if self._fill is None:
            return self.built_by_rq(payment_key)
        job_id = str(uuid.uuid4())
        at = utcformat(datetime.datetime.now(datetime.UTC))
        return PreparedJob(job_id, self._fill(job_id, at, payment_key))

    def built_by_rq(self, payment_key: str) -> PreparedJob:
        """RQ's ``create_job``, then its ``enqueue_job`` captured on a pipeline never sent."""
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

    def _pattern(self) -> Filler | None:
        """RQ's commands for one job with its varying parts as slots, or None when filling
        them in does not give what RQ builds for another payment key."""
        dumps = self.queue.serializer.dumps
        fill = _filler(self.built_by_rq("pi_pattern_a"), "pi_pattern_a", dumps)
        other = self.built_by_rq("pi_pattern_b_2")
        at = "2000-01-02T03:04:05.000006Z"
        filled = fill(other.job_id, at, "pi_pattern_b_2")
        if filled != _timed(other.commands, at):
            log.warning("RQ builds jobs unlike the pattern: each job is built by RQ")
            return None
        return fill


def _timed(commands: list[Any], at: str) -> list[Any]:
    """The commands with every timestamp RQ writes set to ``at``."""
    return [at if i and commands[i - 1] in _TIMES else v for i, v in enumerate(commands)]


_TIMES = ("created_at", "enqueued_at")


def _filler(job: PreparedJob, payment_key: str, dumps: Callable[[Any], bytes]) -> Filler:
    """Fills the commands of ``job`` (for ``payment_key``) in for another id, time and key."""
    job_key, description = keys.RQ_JOB_PREFIX + job.job_id, f"fulfil {payment_key}"
    slots: list[tuple[int, str]] = []
    for i, value in enumerate(job.commands):
        follows = job.commands[i - 1] if i else None
        if value == job.job_id:
            slots.append((i, "id"))
        elif value == job_key:
            slots.append((i, "key"))
        elif value == description:
            slots.append((i, "description"))
        elif follows in _TIMES:
            slots.append((i, "at"))
        elif follows == "data":
            slots.append((i, "data"))
    pattern = list(job.commands)

    def fill(job_id: str, at: str, key: str) -> list[Any]:
        values = {
            "id": job_id,
            "key": keys.RQ_JOB_PREFIX + job_id,
            "description": f"fulfil {key}",
            "at": at,
            "data": zlib.compress(dumps((FULFIL_JOB, None, (key,), {}))),
        }
        filled = pattern.copy()
        for i, slot in slots:
            filled[i] = values[slot]
        return filled

    return fill
