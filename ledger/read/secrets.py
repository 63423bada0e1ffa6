"""Which secret verifies the deliveries, by label, and which secret can be retired.

Deliveries are counted under the verifying secret's label (``secret:{label}`` in the stats
hash) and the time of its last one is kept (``wl:secrets:last_seen``).

Statuses: ``in_use`` (a delivery within the retire window), ``safe_to_retire`` (none for
that long, and another configured secret verified deliveries since), ``idle`` (none for
that long, but neither has any other secret: a quiet endpoint proves nothing),
``never_seen`` and ``not_configured`` (known to the ledger only).
"""

from datetime import datetime
from typing import Literal

from redis import Redis

from ledger import keys
from ledger.clock import time_ms
from ledger.read.base import View
from ledger.stored import ms_time, text

DAY_MS = 86_400_000

SecretStatus = Literal["in_use", "safe_to_retire", "idle", "never_seen", "not_configured"]


class SecretUsage(View):
    label: str
    configured: bool
    deliveries: int
    last_seen_at: datetime | None
    status: SecretStatus


class SecretList(View):
    retire_after_days: int
    secrets: list[SecretUsage]


def usage(redis: Redis, labels: list[str], retire_after_days: int) -> SecretList:
    """One row per configured label, in order, then per label only the ledger knows."""
    pipe = redis.pipeline(transaction=False)
    pipe.hgetall(keys.STATS)
    pipe.hgetall(keys.SECRETS_LAST_SEEN)
    pipe.time()
    stats, seen, time = pipe.execute()
    counts = {
        text(k).removeprefix("secret:"): int(v)
        for k, v in stats.items()
        if text(k).startswith("secret:")
    }
    last_seen = {text(k): int(v) for k, v in seen.items()}
    now_ms = time_ms(time)
    found = rows(labels, counts, last_seen, now_ms, retire_after_days)
    return SecretList(retire_after_days=retire_after_days, secrets=found)


def rows(
    labels: list[str],
    counts: dict[str, int],
    last_seen: dict[str, int],
    now_ms: int,
    retire_after_days: int,
) -> list[SecretUsage]:
    """The usage rows from the counts and last-seen times (ms)."""
    others = sorted((counts.keys() | last_seen.keys()) - set(labels))
    return [
        SecretUsage(
            label=label,
            configured=label in labels,
            deliveries=counts.get(label, 0),
            last_seen_at=ms_time(last_seen.get(label)),
            status=status(label, labels, last_seen, now_ms, retire_after_days),
        )
        for label in labels + others
    ]


def status(
    label: str, labels: list[str], last_seen: dict[str, int], now_ms: int, days: int
) -> SecretStatus:
    """One of the SecretStatus values for ``label`` at ``now_ms``."""
    if label not in labels:
        return "not_configured"
    last = last_seen.get(label)
    if last is None:
        return "never_seen"
    if now_ms - last < days * DAY_MS:
        return "in_use"
    moved = any(last_seen.get(other, 0) > last for other in labels if other != label)
    return "safe_to_retire" if moved else "idle"
