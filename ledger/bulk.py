"""A person's decision on many payments at once: every payment in a state (failed, or
interrupted after the person checked the downstream), optionally only those that entered it
within a time and whose last error contains a text. Each payment is decided by the same
one-payment script as ``retry PAYMENT_KEY``, which acts only on a payment still in that
state: two bulk runs at once re-queue each payment once."""

import re

from redis import Redis

from ledger import keys
from ledger.attempts import Attempts
from ledger.clock import now_ms
from ledger.decisions import decide
from ledger.stored import text
from ledger.views import BulkDecision, Decision, Problem

BULK_STATES = {"retry": ("failed", "held"), "resolve": ("interrupted", "held")}
"""The states a bulk action is for (the one-payment action's, ledger/attempts.py)."""

MAX_BULK = 100_000
"""Most payments one bulk run looks at (newest first)."""

_DURATION = re.compile(r"(\d+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class BadFilter(ValueError):
    """A filter a bulk run cannot use (an unknown state, a malformed duration)."""


def duration_s(given: str) -> int:
    """``90s``, ``30m``, ``2h``, ``7d`` (or ``1h30m``) in seconds."""
    parts = _DURATION.findall(given.strip().lower())
    if not parts or "".join(n + u for n, u in parts) != given.strip().lower():
        raise BadFilter(f"since must be a duration such as 30m, 2h or 7d, not {given!r}")
    return sum(int(n) * _UNIT_S[u] for n, u in parts)


def matching(redis: Redis, state: str, since: str, error: str) -> list[str]:
    """The payments in ``state`` (that entered it within ``since``; whose last error holds
    ``error``, case-insensitive), newest first."""
    oldest = now_ms(redis) - duration_s(since) * 1000 if since else "-inf"
    found = redis.zrevrangebyscore(keys.state_index(state), "+inf", oldest, 0, MAX_BULK)
    payment_keys = [text(k) for k in found]
    if not error:
        return payment_keys
    with redis.pipeline(transaction=False) as pipe:
        for pk in payment_keys:
            pipe.hget(keys.payment(pk), "last_error")
        errors = pipe.execute()
    wanted = error.lower()
    return [
        pk for pk, e in zip(payment_keys, errors, strict=True) if e and wanted in text(e).lower()
    ]


def bulk(
    attempts: Attempts, action: str, state: str, since: str, error: str, dry_run: bool, who: str
) -> BulkDecision:
    """Re-queue (``retry`` failed, ``resolve`` interrupted as not applied) every matching
    payment; ``dry_run``: only count and list them."""
    if state not in BULK_STATES.get(action, ()):
        raise BadFilter(f"{action} applies to {' or '.join(BULK_STATES[action])} payments")
    found = matching(attempts.redis, state, since, error)
    requeued: list[str] = []
    running = 0
    for pk in [] if dry_run else found:
        answer = decide(attempts, pk, action, "retry", who)
        if isinstance(answer, Decision):
            requeued.append(pk)
        running += (
            answer.error == "attempt_may_still_be_running" if isinstance(answer, Problem) else 0
        )
    return BulkDecision(
        action=action,
        state=state,
        since=since or None,
        error=error or None,
        dry_run=dry_run,
        matched=len(found),
        requeued=len(requeued),
        still_running=running,
        payment_keys=(found if dry_run else requeued)[:100],
    )
