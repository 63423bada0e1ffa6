"""Whether the downstream may be called now, for every worker at once: pause, the circuit
breaker of the downstream called (one per downstream: ``keys.BREAKERS``) and rate limit,
each one atomic script in Redis (lua/gate.lua, lua/breaker.lua, lua/release.lua,
lua/pause.lua, lua/resume.lua). A payment held back waits in the ledger as ``retrying``
with a ``waiting`` reason and its attempt budget untouched; the sweeper brings it back."""

import os
from dataclasses import dataclass

from redis import Redis

from ledger import keys, limits
from ledger.replication import NotReplicated, replicated
from ledger.replies import Admission
from ledger.scripts import Script
from ledger.settings import Settings
from ledger.stored import text


@dataclass(frozen=True)
class Health:
    """What one call said about the downstream as a whole (not about the payment)."""

    kind: str
    """up (it answered), down (see BREAKER_THRESHOLD), none (no call was made)"""
    sent: bool = True
    retry_after_s: float = 0.0


class Gate:
    """One per process."""

    def __init__(self, redis: Redis, settings: Settings, clock_key: str = "") -> None:
        self.redis = redis
        self.settings = settings
        names = ("gate", "breaker", "release", "pause", "resume")
        self.scripts = {n: Script(redis, n, clock_key) for n in names}

    def admit(
        self,
        payment_key: str,
        job_id: str,
        park_rate: bool = False,
        out_of_time: bool = False,
        breaker: keys.Breaker = keys.FULFILMENT_BREAKER,
    ) -> Admission:
        """``out_of_time``: the job has no longer the time its attempt needs; a payment that
        would be admitted is due again at once instead (verdict ``wait``). ``breaker``: the
        one of the downstream the call goes to (:func:`ledger.downstream.breaker_of`)."""
        s = self.settings
        args = {
            "job_id": job_id,
            "cooldown_ms": int(s.BREAKER_COOLDOWN_SECONDS * 1000),
            "probe_ms": s.lease_ms,
            "max_rate": s.FULFILMENT_MAX_RATE,
            "park_ms": limits.PAUSE_RECHECK_SECONDS * 1000,
            "rate_park": int(park_rate),
            "out_of_time": int(out_of_time),
            "breaker_wait": breaker.wait,
        }
        called = {"payment": keys.payment(payment_key), "breaker": breaker.state}
        return self.scripts["gate"](called, args)

    def report(
        self,
        payment_key: str,
        token: int,
        health: Health,
        detail: str,
        breaker: keys.Breaker = keys.FULFILMENT_BREAKER,
    ) -> str:
        """Count one call's health for ``breaker`` (the one that admitted it); returns its
        state after it."""
        s = self.settings
        retry_after = min(health.retry_after_s, s.BREAKER_MAX_RETRY_AFTER_SECONDS)
        args = {
            "token": token,
            "kind": health.kind,
            "sent": int(health.sent),
            "threshold": s.BREAKER_THRESHOLD,
            "cooldown_ms": int(s.BREAKER_COOLDOWN_SECONDS * 1000),
            "retry_after_ms": int(retry_after * 1000),
            "probe_ms": s.lease_ms,
            "detail": detail[:300],
        }
        told = {
            "payment": keys.payment(payment_key),
            "breaker": breaker.state,
            "witnesses": breaker.witnesses,
        }
        return text(self.scripts["breaker"](told, args))

    def release(self, limit: int = 500) -> int:
        """The sweeper's step: payments whose pause or open breaker is over become due."""
        held_by = {b.wait: b.state for b in keys.BREAKERS}
        return int(self.scripts["release"](held_by, {"limit": limit}))

    def pause(self, by: str, reason: str) -> bool:
        """Pause fulfilment (False: it already was; the first pause's who and why stay)."""
        return self._changed("pause", {"by": by, "reason": reason})

    def resume(self, by: str) -> bool:
        """Resume fulfilment (False: it was not paused)."""
        return self._changed("resume", {"by": by})

    def _changed(self, action: str, args: dict[str, str]) -> bool:
        """One atomic script, answered once LEDGER_MIN_REPLICAS replicas have it, like a
        person's decision on a payment: a pause a person was told of survives a failover.
        NotReplicated says the change is on the primary only."""
        request = {**args, "request": os.urandom(8).hex()}
        try:
            return bool(replicated(self.scripts[action], {}, request, self.settings))
        except NotReplicated as exc:
            raise NotReplicated(
                f"the {action} is {exc}: a failover now could undo it; {action} again to "
                "have it confirmed"
            ) from exc
