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
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rq import Queue
from rq.utils import utcformat

STAMPED_TIMES = ("created_at", "enqueued_at")
STAMPED_FIELDS = {"data", "description", *STAMPED_TIMES}


def hset_fields(command: list[Any]) -> Iterable[int]:
    """Positions of the field names of an HSET command (each value follows its name)."""
    return range(2, len(command) - 1, 2) if str(command[0]).upper() == "HSET" else ()


def flatten(commands: list[list[Any]]) -> list[Any]:
    """``[n, arg1..argn]*``: the form the ledger script reads the commands in."""
    flat: list[Any] = []
    for command in commands:
        flat.append(len(command))
        flat.extend(command)
    return flat


@dataclass(frozen=True)
class Plan:
    """Where a template's commands change per job: (command, arg) positions holding the job
    id, and (command, arg, field) positions of the per-job HSET values."""

    ids: list[tuple[int, int]]
    values: list[tuple[int, int, str]]


def _plan(template: list[list[Any]], template_id: str) -> Plan:
    ids, values = [], []
    for c, command in enumerate(template):
        ids += [(c, i) for i, a in enumerate(command) if isinstance(a, str) and template_id in a]
        stamped = [i for i in hset_fields(command) if command[i] in STAMPED_FIELDS]
        values += [(c, i + 1, command[i]) for i in stamped]
    return Plan(ids, values)


class JobCommands:
    def __init__(self, queue: Queue, func: str, **job_options: Any) -> None:
        self.queue, self.func, self.options = queue, func, job_options
        self._template: tuple[str, list[list[Any]]] | None = None
        self._plan: Plan | None = None
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
        if self._plan is None:
            self._plan = _plan(template, template_id)
        data = compress_small(self.queue.serializer.dumps((self.func, None, (payment_key,), {})))
        values = {"data": data, "description": f"fulfil {payment_key}"}
        values |= dict.fromkeys(STAMPED_TIMES, now)
        out = [list(command) for command in template]
        for c, i in self._plan.ids:
            out[c][i] = out[c][i].replace(template_id, job_id)
        for c, i, name in self._plan.values:
            out[c][i] = values[name]
        return out

    def _check(self) -> bool:
        self._template = self.by_rq("pi_template")
        probe_id, expected = self.by_rq("pi_probe", job_id="probe-job-id")
        now = next(
            (c[i + 1] for c in expected for i in hset_fields(c) if c[i] == "created_at"),
            "",
        )
        got = self.stamped("pi_probe", probe_id, str(now))
        return _comparable(got) == _comparable(expected)

    def commands(self, payment_key: str) -> tuple[str, list[Any]]:
        """A new job id and the flattened commands that enqueue fulfil_payment(payment_key)."""
        if self._trusted is None:
            self._trusted = self._check()
        if not self._trusted:
            job_id, commands = self.by_rq(payment_key)
            return job_id, flatten(commands)
        job_id = str(uuid.uuid4())
        return job_id, flatten(self.stamped(payment_key, job_id, utcformat(datetime.now(UTC))))


def compress_small(data: bytes) -> bytes:
    """A zlib stream RQ's ``zlib.decompress`` reads, ~13x cheaper than ``zlib.compress`` for
    a 80-byte job payload: a 512-byte window instead of a freshly allocated 256 KB state."""
    packer = zlib.compressobj(6, zlib.DEFLATED, 9, 1)
    return packer.compress(data) + packer.flush()


def _comparable(commands: list[list[Any]]) -> list[list[Any]]:
    """Commands with their times blanked and the job data decompressed (same bytes, maybe
    packed with other zlib settings)."""
    out = []
    for command in commands:
        new = list(command)
        for i in hset_fields(new):
            if new[i] in STAMPED_TIMES:
                new[i + 1] = "T"
            elif new[i] == "data":
                new[i + 1] = zlib.decompress(new[i + 1])
        out.append(new)
    return out
