"""The RQ commands that enqueue one fulfilment job, built with RQ's own code, cheaply.

The receiver cannot know which delivery is a payment's first paid one until the ledger
script runs, so every paid delivery offers the commands (the script runs them at most once
per payment). RQ takes ~0.2-0.3 ms to build a job (a Job object, its serializer, to_dict,
a pipeline). ``JobCommands`` lets RQ build one job per process as a template and re-stamps
it for each payment (id, payload, description, times), after checking on first use that a
re-stamped job is exactly what RQ builds itself; if RQ's format ever differs, RQ builds
every job.
"""

import uuid
import zlib
from datetime import UTC, datetime
from typing import Any

from rq import Queue
from rq.utils import utcformat

STAMPED_TIMES = ("created_at", "enqueued_at")


def flatten(commands: list[list[Any]]) -> list[Any]:
    """``[n, arg1..argn]*``: the form the ledger script reads the commands in."""
    flat: list[Any] = []
    for command in commands:
        flat.append(len(command))
        flat.extend(command)
    return flat


class JobCommands:
    def __init__(self, queue: Queue, func: str, **job_options: Any) -> None:
        self.queue, self.func, self.options = queue, func, job_options
        self._template: tuple[str, list[list[Any]]] | None = None
        self._trusted: bool | None = None

    def by_rq(self, payment_key: str, job_id: str | None = None) -> tuple[str, list[list[Any]]]:
        """The commands RQ itself sends for ``enqueue_job``, captured from a pipeline."""
        job = self.queue.create_job(
            self.func,
            args=(payment_key,),
            job_id=job_id,
            description=f"fulfil {payment_key}",
            **self.options,
        )
        pipe = self.queue.connection.pipeline(transaction=False)
        self.queue.enqueue_job(job, pipeline=pipe)
        commands = [list(args) for args, _options in pipe.command_stack]
        pipe.reset()
        return job.id, commands

    def stamped(self, payment_key: str, job_id: str, now: str) -> list[list[Any]]:
        """The template's commands for another payment, job id and time."""
        assert self._template is not None
        template_id, template = self._template
        data = zlib.compress(self.queue.serializer.dumps((self.func, None, (payment_key,), {})))
        values = {"data": data, "description": f"fulfil {payment_key}"}
        values |= dict.fromkeys(STAMPED_TIMES, now)
        out = []
        for command in template:
            new = [a.replace(template_id, job_id) if isinstance(a, str) else a for a in command]
            if str(new[0]).upper() == "HSET":
                for i in range(2, len(new) - 1, 2):
                    new[i + 1] = values.get(new[i], new[i + 1])
            out.append(new)
        return out

    def _check(self) -> bool:
        self._template = self.by_rq("pi_template")
        probe_id, expected = self.by_rq("pi_probe", job_id="probe-job-id")
        now = next(
            (c[i + 1] for c in expected for i in range(2, len(c) - 1, 2) if c[i] == "created_at"),
            "",
        )
        got = self.stamped("pi_probe", probe_id, str(now))
        return _without_times(got) == _without_times(expected)

    def commands(self, payment_key: str) -> tuple[str, list[Any]]:
        """A new job id and the flattened commands that enqueue fulfil_payment(payment_key)."""
        if self._trusted is None:
            self._trusted = self._check()
        if not self._trusted:
            job_id, commands = self.by_rq(payment_key)
            return job_id, flatten(commands)
        job_id = str(uuid.uuid4())
        return job_id, flatten(self.stamped(payment_key, job_id, utcformat(datetime.now(UTC))))


def _without_times(commands: list[list[Any]]) -> list[list[Any]]:
    out = []
    for command in commands:
        new = list(command)
        if str(new[0]).upper() == "HSET":
            for i in range(2, len(new) - 1, 2):
                if new[i] in STAMPED_TIMES:
                    new[i + 1] = "T"
        out.append(new)
    return out
