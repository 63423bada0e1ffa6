"""Read-only views of the ledger, shared by the ops API, the CLI and the replay report."""

import math
from typing import Any

import orjson
from redis import Redis
from rq import Queue, Worker

from ledger import defaults, keys
from ledger.payloads import decompress_payload

PAYMENT_STATES = (
    "pending",
    "queued",
    "in_progress",
    "retrying",
    "fulfilled",
    "failed",
    "interrupted",
    "held",
)
ATTENTION = "attention"
"""The pseudo-state of ``payments``: everything that waits for a person."""
ATTENTION_STATES = ("interrupted", "held", "failed")
"""States that wait for a person; a payment queued too long joins them."""
STATE_FILTERS = (*PAYMENT_STATES, ATTENTION)
"""What ``payments`` may be filtered by."""
COUNTERS = ("deliveries", "events", "duplicates", "conflicts", "rejected", "reconciled")
"""``reconciled``: events recorded from Stripe's Events API, not delivered (no delivery)."""


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
    pipe.llen(keys.rq_queue(queue_name))
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
    raw: dict[bytes, bytes] = redis.hgetall(keys.payment(payment_key))  # type: ignore[assignment]
    return payment_record(payment_key, raw) if raw else None


# The outcomes a worker writes when it finishes its attempt: FINISHED in lua/prelude.lua.
FINISHED_OUTCOMES = {"fulfilled", "retry", "failed", "interrupted", "not_called"}


def payment_record(payment_key: str, raw: dict[bytes, bytes]) -> dict[str, Any]:
    """A payment hash as read by people: ``attempt:{n}`` fields become an ordered list of
    JSON records (with their token, and a fulfilled one's receipt), counts are derived."""
    record: dict[str, Any] = {}
    attempts: dict[int, dict[str, Any]] = {}
    for field, value in _decode_hash(raw).items():
        name, _, token = field.partition(":")
        if name == "attempt" and token.isdigit():
            attempts[int(token)] = {"token": int(token), **orjson.loads(value)}
        else:
            record[field] = value
    for done in attempts.values():
        if done.get("outcome") == "fulfilled":  # at most one; its end and receipt are kept once
            done.setdefault("ended", int(record.get("fulfilled_at", 0)) or None)
            done.setdefault("detail", record.get("receipt"))
    record["key"] = payment_key
    record["latency_ms"] = latency_ms(record)
    record["events"] = record.get("events", "").split()
    nth = record.pop("paid_by_n", "")  # how payments recorded before paid_by named it
    if nth.isdigit() and 0 < int(nth) <= len(record["events"]):
        record["paid_by"] = record["events"][int(nth) - 1]
    record["attempts_started"] = record.get("token", "0")
    finished = sum(1 for a in attempts.values() if a.get("outcome") in FINISHED_OUTCOMES)
    record["attempts_finished"] = str(finished)
    record["attempts"] = [orjson.dumps(attempts[t]).decode() for t in sorted(attempts)]
    return record


def events(
    redis: Redis,
    event_type: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    offset: int = 0,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """Latest events first, optionally of one type or within a time range (first delivery)."""
    high = until_ms if until_ms is not None else "+inf"
    low = since_ms if since_ms is not None else "-inf"
    found: list[dict[str, Any]] = []
    # Without a type filter the index pages directly; with one, scan (bounded) and page.
    wanted = limit if event_type is None else offset + limit
    start = offset if event_type is None else 0
    while len(found) < wanted and start - (offset if event_type is None else 0) < MAX_SCAN:
        batch = redis.zrevrangebyscore(keys.EVENT_INDEX, high, low, start=start, num=200)
        if not batch:
            break
        start += len(batch)
        pipe = redis.pipeline(transaction=False)
        for event_id in batch:
            pipe.hmget(keys.event(text(event_id)), EVENT_FIELDS)
        for event_id, values in zip(batch, pipe.execute(), strict=True):
            record = {
                f: text(v) if v is not None else ""
                for f, v in zip(EVENT_FIELDS, values, strict=True)
            }
            if not record["n"] or (event_type and record["type"] != event_type):
                continue
            found.append({"id": text(event_id), **record})
    return found[:limit] if event_type is None else found[offset : offset + limit]


MAX_SCAN = 20_000
"""Most index entries one filtered events query reads."""
EVENT_FIELDS = (
    "type",
    "n",
    "first",
    "last",
    "pk",
    "secret",
    "livemode",
    "conflicts",
    "role",
    "origin",
)


def payments(
    redis: Redis,
    state: str | None = None,
    offset: int = 0,
    limit: int = 50,
    stuck_after_s: int = defaults.STUCK_QUEUED_SECONDS,
) -> list[dict[str, Any]]:
    """Payments, most recent state change first; all states merged when ``state`` is None;
    ``attention``: the ones that need a person (ATTENTION_STATES, and queued too long)."""
    states = [state] if state else list(PAYMENT_STATES)
    if state == ATTENTION:
        states = list(ATTENTION_STATES)
    pipe = redis.pipeline(transaction=False)
    for s in states:
        pipe.zrevrange(keys.state_index(s), 0, offset + limit - 1, withscores=True)
    if state == ATTENTION:
        seconds, _ = redis.time()
        stuck_before = (seconds - stuck_after_s) * 1000
        pipe.zrevrangebyscore(
            keys.state_index("queued"), stuck_before, "-inf", 0, offset + limit, withscores=True
        )
    merged = sorted(
        ((text(pk), score) for batch in pipe.execute() for pk, score in batch),
        key=lambda item: -item[1],
    )[offset : offset + limit]
    pipe = redis.pipeline(transaction=False)
    for pk, _ in merged:
        pipe.hmget(keys.payment(pk), PAYMENT_FIELDS)
    rows = []
    for (pk, since), values in zip(merged, pipe.execute(), strict=True):
        record = {
            f: text(v) if v is not None else "" for f, v in zip(PAYMENT_FIELDS, values, strict=True)
        }
        record["attempts_started"] = record.pop("token") or "0"
        rows.append(
            {"key": pk, "state_since": int(since), **record, "latency_ms": latency_ms(record)}
        )
    return rows


PAYMENT_FIELDS = (
    "state",
    "deliveries",
    "token",
    "last_error",
    "paid_at",
    "fulfilled_at",
    "amount",
    "currency",
    "hold_reason",
    "account",
)


def latency_ms(record: dict[str, Any]) -> int | None:
    """First paid delivery to fulfilled, from the two times the payment keeps."""
    paid, done = record.get("paid_at", ""), record.get("fulfilled_at", "")
    return int(done) - int(paid) if paid.isdigit() and done.isdigit() else None


def rejections(redis: Redis, limit: int = 100) -> list[dict[str, Any]]:
    return [orjson.loads(r) for r in redis.lrange(keys.REJECTIONS, 0, limit - 1)]


def series(redis: Redis, minutes: int = 60) -> list[dict[str, int]]:
    """Deliveries and rejections per minute for the last ``minutes`` minutes (oldest first)."""
    seconds, _ = redis.time()
    now_minute = seconds // 60
    first = now_minute - minutes + 1
    hours = sorted({m // 60 for m in range(first, now_minute + 1)})
    pipe = redis.pipeline(transaction=False)
    for hour in hours:
        pipe.hgetall(keys.series(hour))
    counts = {text(k): int(v) for batch in pipe.execute() for k, v in batch.items()}
    return [
        {
            "minute": m * 60,
            "deliveries": counts.get(f"d:{m}", 0),
            "rejected": counts.get(f"r:{m}", 0),
        }
        for m in range(first, now_minute + 1)
    ]


def workers_state(redis: Redis, queue_name: str) -> dict[str, Any]:
    """Queue length, live RQ workers and the age of the oldest queued job."""
    queue = Queue(queue_name, connection=redis)
    head = redis.lindex(queue.key, 0)
    oldest_s = None
    if head is not None:
        job = queue.fetch_job(text(head))
        if job is not None and job.enqueued_at is not None:
            seconds, _ = redis.time()
            oldest_s = round(seconds - job.enqueued_at.timestamp(), 1)
    workers = Worker.all(connection=redis, queue=queue)
    return {
        "queue_length": queue.count,
        "workers": len(workers),
        "workers_busy": sum(1 for w in workers if w.get_state() == "busy"),
        "oldest_queued_age_s": oldest_s,
        "due_for_sweeper": redis.zcard(keys.DUE),
    }
