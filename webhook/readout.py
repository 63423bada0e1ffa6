"""Read-only views of the ledger, shared by the ops API, the CLI and the replay report."""

import math
from typing import Any

from redis import Redis

from webhook import keys
from webhook.ledger import decompress_payload

PAYMENT_STATES = (
    "pending",
    "queued",
    "in_progress",
    "retrying",
    "fulfilled",
    "failed",
    "interrupted",
)
COUNTERS = ("deliveries", "events", "duplicates", "conflicts", "rejected")


def text(value: Any) -> str:
    """A Redis reply as str (clients here do not decode responses)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _decode_hash(raw: dict[Any, Any], skip: tuple[str, ...] = ()) -> dict[str, str]:
    return {text(k): text(v) for k, v in raw.items() if text(k) not in skip}


def percentiles(samples: list[float], points: tuple[int, ...] = (50, 90, 99)) -> dict[str, float]:
    """Nearest-rank percentiles of ``samples`` (empty dict when there are none)."""
    if not samples:
        return {}
    ordered = sorted(samples)
    return {f"p{p}": ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] for p in points}


def summary(redis: Redis, queue_name: str) -> dict[str, Any]:
    """Global counters, rejections by reason, payments by state and fulfilment figures."""
    pipe = redis.pipeline(transaction=False)
    pipe.hgetall(keys.STATS)
    pipe.hgetall(keys.PAYMENT_STATES)
    pipe.lrange(keys.LATENCIES, 0, -1)
    pipe.llen(f"rq:queue:{queue_name}")
    stats_raw, states_raw, latencies, queued_jobs = pipe.execute()
    stats = {k: int(v) for k, v in _decode_hash(stats_raw).items()}
    grouped: dict[str, dict[str, int]] = {}
    for name, value in stats.items():
        group, sep, sub = name.partition(":")
        if sep:
            grouped.setdefault(group, {})[sub] = value
    states = {k: int(v) for k, v in _decode_hash(states_raw).items()}
    return {
        **{name: stats.get(name, 0) for name in COUNTERS},
        "rejected_by_reason": grouped.get("rejected", {}),
        "deliveries_by_source": grouped.get("source", {}),
        "deliveries_by_secret": grouped.get("secret", {}),
        "deliveries_by_type": grouped.get("type", {}),
        "payments": {s: states.get(s, 0) for s in PAYMENT_STATES},
        "attempts": {
            "started": stats.get("attempts_started", 0),
            "finished": stats.get("attempts_finished", 0),
        },
        "effects": stats.get("effects", 0),
        "fulfil_latency_ms": percentiles([float(x) for x in latencies]),
        "queue_length": int(queued_jobs),
    }


def event(redis: Redis, event_id: str, with_payload: bool = False) -> dict[str, Any] | None:
    """One event record, its payload decompressed on request."""
    raw: dict[bytes, bytes] = redis.hgetall(keys.event(event_id))  # type: ignore[assignment]
    if not raw:
        return None
    record: dict[str, Any] = _decode_hash(raw, skip=("body",))
    record["id"] = event_id
    if with_payload and b"body" in raw:
        record["payload"] = decompress_payload(raw[b"body"]).decode()
    return record


def payment(redis: Redis, payment_key: str) -> dict[str, Any] | None:
    """One payment record with its event ids and attempts."""
    pipe = redis.pipeline(transaction=False)
    pipe.hgetall(keys.payment(payment_key))
    pipe.lrange(keys.attempts(payment_key), 0, -1)
    raw, attempts = pipe.execute()
    if not raw:
        return None
    record: dict[str, Any] = _decode_hash(raw)
    record["key"] = payment_key
    record["events"] = record.get("events", "").split()
    record["attempts"] = [text(a) for a in attempts]
    return record
