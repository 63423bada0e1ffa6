"""The fulfilment state machine, kept in the ledger and changed only by Lua scripts.

queued -> in_progress -> fulfilled, with retrying, failed (dead letter) and interrupted.
Each attempt takes a lease and a fencing token; only the current token may call the
downstream (mark_calling) or record the outcome (finish).
"""

import os
from dataclasses import dataclass
from typing import Any

import orjson
from redis import Redis
from redis.commands.core import Script
from rq.job import Job

from ledger import defaults, faults, keys
from ledger.deliveries import load_script
from ledger.enqueue import Jobs
from ledger.queries import text
from ledger.settings import Settings


def _script(name: str) -> str:
    return load_script("ledger", name, "common.lua")


@dataclass(frozen=True)
class Start:
    verdict: str
    token: int = 0
    reason: str = ""
    call_fields: dict[str, str] | None = None
    """amount, currency, livemode, events: what the downstream call needs (with ``go``)."""


class Attempts:
    """One per process; every method is one atomic script call."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.jobs = Jobs(redis, settings)
        names = ("start_attempt", "mark_calling", "finish_attempt", "recover", "operator", "purge")
        self.scripts = {n: redis.register_script(_script(f"{n}.lua")) for n in names}

    def _keys(self, payment_key: str) -> list[str]:
        return [
            keys.payment(payment_key),
            keys.PAYMENT_STATES,
            keys.DUE,
            keys.STATS,
        ]

    def start(self, payment_key: str, job_id: str, replay_safe: bool) -> Start:
        """Take a lease for one run of a job; ``execution`` tells a client retry of this very
        call (answered ``go`` again) from a second run of the same RQ job (skipped)."""
        lease_ms = self.settings.lease_ms
        execution = f"{job_id}:{os.urandom(6).hex()}"
        max_attempts = self.settings.MAX_ATTEMPTS
        args: list[Any] = [job_id, lease_ms, int(replay_safe), payment_key, execution, max_attempts]
        reply = self.scripts["start_attempt"](keys=self._keys(payment_key), args=args)
        verdict, token, *rest = reply
        if text(verdict) == "go":
            fields = dict(
                zip(("amount", "currency", "livemode", "events"), map(text, rest), strict=True)
            )
            return Start("go", int(token), call_fields=fields)
        return Start(text(verdict), int(token), text(rest[0]) if rest else "")

    def mark_calling(self, payment_key: str, token: int) -> bool:
        lease_ms = self.settings.lease_ms
        script_keys = [keys.payment(payment_key)]
        return bool(self.scripts["mark_calling"](keys=script_keys, args=[token, lease_ms]))

    def finish(
        self, payment_key: str, token: int, outcome: str, detail: str, call_ms: float
    ) -> tuple[str, str]:
        s = self.settings
        args: list[Any] = [
            token,
            outcome,
            detail,
            round(call_ms, 2),
            s.MAX_ATTEMPTS,
            s.retry_base_ms,
            s.retry_cap_ms,
            payment_key,
            defaults.RECENT_LATENCIES,
            " ".join(str(b) for b in defaults.FULFIL_BUCKETS_MS),
        ]
        script_keys = [*self._keys(payment_key), keys.LATENCIES, keys.FULFIL_HISTOGRAM]
        if faults.fires("during_record"):
            self._send_and_die(self.scripts["finish_attempt"], script_keys, args)
        verdict, state = self.scripts["finish_attempt"](keys=script_keys, args=args)
        return text(verdict), text(state)

    def _send_and_die(self, script: Script, script_keys: list[str], args: list[Any]) -> None:
        """Fault point ``during_record``: the write is on the wire when the process dies."""
        self.redis.script_load(script.script)
        connection = self.redis.connection_pool.get_connection()
        connection.send_command("EVALSHA", script.sha, len(script_keys), *script_keys, *args)
        faults.act("during_record")

    def recover(self, payment_key: str) -> str:
        """The sweeper's step for one due payment; returns what it did."""
        s = self.settings
        job = self.jobs.enqueue(payment_key)
        args: list[Any] = [
            payment_key,
            s.grace_ms,
            Job.redis_job_namespace_prefix,
            job.job_id,
            s.MAX_ATTEMPTS,
            s.retry_base_ms,
            s.retry_cap_ms,
            *job.commands,
        ]
        script_keys = [*self._keys(payment_key), self.jobs.queue.key]
        (verdict,) = self.scripts["recover"](keys=script_keys, args=args)
        return text(verdict)

    def decide(
        self, payment_key: str, decision: str, allowed: tuple[str, ...], note: str
    ) -> tuple[str, str]:
        """A person's retry or resolution: ``ok``, ``refused`` (wrong state) or ``wait``
        (an interrupted call may still be in flight until the returned time, epoch ms)."""
        s = self.settings
        job = self.jobs.enqueue(payment_key)
        in_flight_ms = s.job_timeout_s * 1000  # a stalled call cannot outlive its RQ job
        args: list[Any] = [
            payment_key,
            decision,
            " ".join(allowed),
            note,
            s.grace_ms,
            job.job_id,
            in_flight_ms,
            *job.commands,
        ]
        verdict, state = self.scripts["operator"](keys=self._keys(payment_key), args=args)
        return text(verdict), text(state)

    def purge(self, limit: int = 500) -> int:
        """Delete settled payments older than PAYMENT_RETENTION_DAYS (0 keeps them for ever)."""
        days = self.settings.PAYMENT_RETENTION_DAYS
        if days <= 0:
            return 0
        seconds, _ = self.redis.time()
        cutoff_ms = (seconds - days * 86400) * 1000
        return int(self.scripts["purge"](keys=[keys.PAYMENT_STATES], args=[cutoff_ms, limit]))


def encode_receipt(receipt: dict[str, Any]) -> str:
    return orjson.dumps(receipt).decode()
