"""The fulfilment state machine, kept in the ledger and changed only by Lua scripts.

queued -> in_progress -> fulfilled, with retrying, failed (dead letter) and interrupted.
Each attempt takes a lease and a fencing token; only the current token may call the
downstream (mark_calling) or record the outcome (finish).
"""

import os
import socket
from typing import Any

import orjson
from redis import Redis

from ledger import faults, keys
from ledger.clock import now_ms
from ledger.enqueue import Jobs, PreparedJob
from ledger.replication import replicated
from ledger.replies import Decided, Finished, Start
from ledger.scripts import Script
from ledger.settings import Settings
from ledger.stored import text

UNWATCHED = 2**53
"""``trusted_until_ms`` of a sweep that does not watch Redis's clock: any time (exact as a
Lua number)."""


class Attempts:
    """One per process; every method is one atomic script call."""

    def __init__(self, redis: Redis, settings: Settings, clock_key: str = "") -> None:
        self.redis = redis
        self.settings = settings
        self.jobs = Jobs(redis, settings)
        names = (
            *("start_attempt", "mark_calling", "finish_attempt", "recover", "operator"),
            *("purge", "keep_rejections"),
        )
        self.scripts = {name: Script(redis, name, clock_key) for name in names}
        self.caller = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        """This process, as its liveness key names it while it is in a downstream call."""

    def _replicated(
        self, name: str, named_keys: dict[str, str], args: dict[str, Any], extra: Any = ()
    ) -> Any:
        """Transitions that hand out or check a fencing token, or answer a person, count
        once LEDGER_MIN_REPLICAS replicas have them: a promoted replica knows the token."""
        return replicated(self.scripts[name], named_keys, args, self.settings, extra)

    def start(
        self,
        payment_key: str,
        job_id: str,
        replay_safe: bool,
        execution: str | None = None,
        leg: str = "fulfil",
        settles: bool = False,
        downstream: str = "",
        calls: bool = True,
    ) -> Start:
        """Take a lease for one run of a job; ``execution`` (unique per run) tells a client
        retry of this very call (answered ``go`` again) from a second run of the same job.
        ``leg``: the job's action, ``fulfil``, ``reverse``, ``refulfil`` or ``settle``
        (skipped when another is due). ``settles``: the action can settle a payment taken
        back after an attempt that may have applied (docs/REVERSAL.md). ``calls`` False: the
        attempt makes no call (it names no caller)."""
        return self._replicated(
            "start_attempt",
            {"payment": keys.payment(payment_key)},
            {
                "job_id": job_id,
                "execution": execution or f"{job_id}:{os.urandom(6).hex()}",
                "lease_ms": self.settings.lease_ms,
                "replay_safe": int(replay_safe),
                "settles": int(settles),
                "downstream": downstream,
                "caller": self.caller if calls else "",
                "leg": leg,
            },
        )

    def start_without_call(self, payment_key: str, job_id: str, leg: str = "fulfil") -> Start:
        """Take a lease for an attempt that will make no call (a setting is wrong: it is
        failed at once). It says nothing of the action, so the payment keeps what its last
        attempt said (``replay_safe``: a call that may have applied; ``settles``): a refund
        after it is still settled or held, never ``refunded_unfulfilled`` over an effect an
        earlier call may have applied (docs/REVERSAL.md)."""
        said = self.redis.hmget(keys.payment(payment_key), "replay_safe", "settles")
        replay_safe = said[0] == b"1" or leg == "settle"  # a settlement's follows such a call
        settles = said[1] == b"1"
        return self.start(payment_key, job_id, replay_safe, leg=leg, settles=settles, calls=False)

    def mark_calling(self, payment_key: str, token: int) -> bool:
        """The fence before the call: True if this token still holds a live lease."""
        args = {"token": token, "lease_ms": self.settings.lease_ms, "caller": self.caller}
        return bool(self._replicated("mark_calling", {"payment": keys.payment(payment_key)}, args))

    def finish(
        self,
        payment_key: str,
        token: int,
        outcome: str,
        detail: str,
        call_ms: float,
        refused: bool = False,
    ) -> tuple[str, str]:
        """Record how attempt ``token`` ended; returns the verdict and the payment's state.
        ``refused``: the call's answer refused it (outcome ``retry`` or ``failed``): it applied
        nothing, so a replay-safe call no longer counts as one that may have applied."""
        script = self.scripts["finish_attempt"]
        named_keys = {"payment": keys.payment(payment_key)}
        args = {
            "token": token,
            "outcome": outcome,
            "detail": detail,
            "call_ms": round(call_ms, 2),
            "max_attempts": self.settings.MAX_ATTEMPTS,
            "backoff_base_ms": self.settings.retry_base_ms,
            "backoff_cap_ms": self.settings.retry_cap_ms,
            "reverse_on": self.settings.reversal_mode,
            "refused": int(refused),
        }
        if faults.fires("during_record"):
            self._send_and_die(script, *script.positional(named_keys, args))
        finished: Finished = self._replicated("finish_attempt", named_keys, args)
        return finished.verdict, finished.state

    def _send_and_die(self, script: Script, script_keys: list[str], args: list[Any]) -> None:
        """Fault point ``during_record``: the write is on the wire when the process dies."""
        sha = self.redis.script_load(script.registered.script)
        connection = self.redis.connection_pool.get_connection()
        connection.send_command("EVALSHA", sha, len(script_keys), *script_keys, *args)
        faults.act("during_record")

    def recover(
        self, payment_key: str, job: PreparedJob | None = None, trusted_until_ms: int = UNWATCHED
    ) -> str:
        """The sweeper's step for one due payment; returns what it did. ``job`` is the job it
        enqueues if it re-queues the payment (a new one when not given). An expired lease is
        ended only while Redis's clock reads at most ``trusted_until_ms`` (``clock``
        otherwise; ledger/clock.py StepWatch); by default Redis's clock is taken as it is."""
        job = job or self.jobs.prepare(payment_key)
        s = self.settings
        args = {
            "job_id": job.job_id,
            "grace_ms": s.grace_ms,
            "max_attempts": s.MAX_ATTEMPTS,
            "backoff_base_ms": s.retry_base_ms,
            "backoff_cap_ms": s.retry_cap_ms,
            "trusted_until_ms": trusted_until_ms,
        }
        named_keys = {"payment": keys.payment(payment_key), "queue": self.jobs.queue.key}
        return text(self.scripts["recover"](named_keys, args, job.commands))

    def record_decision(
        self,
        payment_key: str,
        decision: str,
        allowed: tuple[str, ...],
        who: str,
        job: PreparedJob | None = None,
    ) -> tuple[str, str]:
        """Record a person's retry or resolution if the payment is in an ``allowed`` state
        (ledger/decisions.py says which): ``ok`` and the new state, ``refused`` and the
        current one ('' when there is no payment), ``by_hand`` (a retry of a payment held
        for a person to grant by hand: Stripe gave it back) or ``wait`` (the worker process
        of the last call may still be in it, at most until the returned time, epoch ms: its
        watchdog ends it by then). ``job`` (a new one when not given) also identifies the
        decision, so a client retry of this call is answered ``ok`` once more."""
        job = job or self.jobs.prepare(payment_key)
        args = {
            "decision": decision,
            "allowed": " ".join(allowed),
            "note": who,
            "job_id": job.job_id,
            "grace_ms": self.settings.grace_ms,
            "reverse_on": self.settings.reversal_mode,
        }
        named_keys = {"payment": keys.payment(payment_key)}
        decided: Decided = self._replicated("operator", named_keys, args, job.commands)
        if decided.verdict == "wait":
            return decided.verdict, str(decided.until_ms)
        return decided.verdict, decided.state

    def purge(self, limit: int = 500) -> int:
        """Delete settled payments older than PAYMENT_RETENTION_DAYS (0 keeps them for ever)."""
        days = self.settings.PAYMENT_RETENTION_DAYS
        if days <= 0:
            return 0
        cutoff_ms = now_ms(self.redis) - days * 86_400_000
        return int(self.scripts["purge"]({}, {"cutoff_ms": cutoff_ms, "limit": limit}))

    def keep_rejections(self) -> int:
        """Put the rejections counted in memory since the last call on disk and on the
        replicas (lua/keep_rejections.lua); how many."""
        return int(self.scripts["keep_rejections"]({}, {"hours": 2}))  # a pass may cross one


def encode_receipt(receipt: dict[str, Any]) -> str:
    return orjson.dumps(receipt).decode()
