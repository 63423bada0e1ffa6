"""The ledger's figures as typed views: counters, the summary (with fulfil latency over a
recent window and the workers seen alive), deliveries per minute and recent rejections.
One reader for the ops API, the CLI, the dashboard, /metrics and the replay report, so
their counts agree."""

import math
from datetime import datetime

import msgspec
import orjson
from redis import Redis
from redis.exceptions import ResponseError
from rq import Queue, Worker
from rq.defaults import DEFAULT_WORKER_TTL

from ledger import defaults, gate, keys
from ledger.clock import now_ms
from ledger.settings import Settings
from ledger.stored import count, decode_hash, ms_time, text, whole
from ledger.views import (
    Counters,
    Latency,
    Minute,
    PaymentStates,
    Rejection,
    Series,
    Summary,
    Workers,
)

COUNTERS = ("deliveries", "events", "duplicates", "conflicts", "rejected", "reconciled")
"""``reconciled``: events recorded from Stripe's Events API, not delivered (no delivery)."""

HEARTBEAT_WINDOW_S = DEFAULT_WORKER_TTL + 60
"""An RQ worker heartbeats at least this often, also while idle (blocked on its queue for
worker_ttl - 15 s), and RQ lets its registration expire after this long without one."""


def counters(redis: Redis) -> Counters:
    """Global counters, deliveries and rejections by kind, payments by state."""
    pipe = redis.pipeline(transaction=False)
    pipe.hgetall(keys.STATS)
    pipe.hgetall(keys.PAYMENT_STATES)
    stats_raw, states_raw = pipe.execute()
    return counters_from(decode_hash(stats_raw), decode_hash(states_raw))


def counters_from(stats: dict[str, str], states: dict[str, str]) -> Counters:
    grouped: dict[str, dict[str, int]] = {}
    for name, value in stats.items():
        group, sep, sub = name.partition(":")
        if sep:
            grouped.setdefault(group, {})[sub] = count(value)
    return Counters(
        **{name: count(stats.get(name)) for name in (*COUNTERS, "effects")},
        attempts_started=count(stats.get("attempts_started")),
        attempts_finished=count(stats.get("attempts_finished")),
        rejected_by_reason=dict(sorted(grouped.get("rejected", {}).items())),
        deliveries_by_source=dict(sorted(grouped.get("source", {}).items())),
        deliveries_by_secret=dict(sorted(grouped.get("secret", {}).items())),
        deliveries_by_type=dict(sorted(grouped.get("type", {}).items())),
        payments_by_state=PaymentStates(
            **{s: count(states.get(s)) for s in PaymentStates.__struct_fields__}
        ),
    )


def now(redis: Redis) -> datetime:
    """Redis's clock, the one every stored time was taken from."""
    moment = ms_time(now_ms(redis))
    assert moment is not None
    return moment


def summary(
    redis: Redis, settings: Settings, window_s: int = defaults.LATENCY_WINDOW_SECONDS
) -> Summary:
    """Counters, fulfil latency over the last ``window_s`` seconds, queue and workers, and
    the shared gate of fulfilment (pause, breaker, rate, who waits)."""
    at = now(redis)
    return Summary(
        **msgspec.structs.asdict(counters(redis)),
        at=at,
        fulfil_latency=latency(redis, at, window_s),
        workers=workers(redis, settings.QUEUE_NAME, at),
        fulfilment=gate.status(redis, settings),
    )


def percentiles(samples: list[int], points: tuple[int, ...] = (50, 90, 99)) -> list[int | None]:
    """Nearest-rank percentiles of ``samples`` (None each when there are none)."""
    ordered = sorted(samples)
    return [
        ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else None for p in points
    ]


def latency(redis: Redis, at: datetime, window_s: int) -> Latency:
    """First paid delivery to fulfilled, of the payments a worker fulfilled in the window
    (the latest LATENCY_SAMPLES of them): an old backlog leaves the figures once it is
    older than the window. Payments a person marked fulfilled are not counted."""
    until_ms = int(at.timestamp() * 1000)
    recent = redis.zrevrangebyscore(
        keys.state_index("fulfilled"),
        until_ms,
        until_ms - window_s * 1000,
        start=0,
        num=defaults.LATENCY_SAMPLES,
    )
    pipe = redis.pipeline(transaction=False)
    for pk in recent:
        pipe.hmget(keys.payment(text(pk)), ("paid_at", "fulfilled_at", "resolved_by"))
    samples = []
    for paid, done, resolved in pipe.execute() if recent else []:
        start, end = whole(paid), whole(done)
        if start is not None and end is not None and resolved is None:
            samples.append(end - start)
    p50, p90, p99 = percentiles(samples)
    return Latency(window_s=window_s, payments=len(samples), p50_ms=p50, p90_ms=p90, p99_ms=p99)


def workers(redis: Redis, queue_name: str, at: datetime) -> Workers:
    """The queue, the oldest job waiting in it, and the RQ workers alive: registered, with a
    heartbeat within HEARTBEAT_WINDOW_S and, where Redis lets us list its clients, still
    connected (a killed worker's registration outlives it by minutes; its connection
    does not)."""
    queue = Queue(queue_name, connection=redis)
    registered = Worker.all(connection=redis, queue=queue)
    connected = _connected_names(redis)
    alive = [
        w
        for w in registered
        if w.last_heartbeat is not None
        and (at - w.last_heartbeat).total_seconds() < HEARTBEAT_WINDOW_S
        and (connected is None or w.name in connected)
    ]
    pipe = redis.pipeline(transaction=False)
    pipe.lindex(queue.key, 0)
    pipe.llen(queue.key)
    pipe.zcard(keys.DUE)
    pipe.hmget(keys.SWEEPER, ("sweeps", "last_ms"))
    head, length, due, (sweeps, last_ms) = pipe.execute()
    return Workers(
        queue_length=int(length),
        oldest_queued_age_s=_age_s(queue, head, at),
        alive=len(alive),
        busy=sum(1 for w in alive if w.get_state() == "busy"),
        registered=len(registered),
        heartbeat_window_s=HEARTBEAT_WINDOW_S,
        due_for_sweeper=int(due),
        sweeper_passes=count(sweeps),
        sweeper_last_pass_at=ms_time(last_ms),
    )


def _connected_names(redis: Redis) -> set[str] | None:
    """Names of the clients connected to Redis (RQ names each worker's connection after the
    worker); None where CLIENT LIST is not allowed."""
    try:
        return {str(c.get("name", "")) for c in redis.client_list()}
    except ResponseError:
        return None


def _age_s(queue: Queue, head: bytes | None, at: datetime) -> float | None:
    job = queue.fetch_job(text(head)) if head is not None else None
    if job is None or job.enqueued_at is None:
        return None
    return round(max(0.0, (at - job.enqueued_at).total_seconds()), 1)


def series(redis: Redis, minutes: int = 60) -> Series:
    """Deliveries and rejections per minute for the last ``minutes`` minutes (oldest first)."""
    now_minute = now_ms(redis) // 60_000
    first = now_minute - minutes + 1
    hours = sorted({m // 60 for m in range(first, now_minute + 1)})
    pipe = redis.pipeline(transaction=False)
    for hour in hours:
        pipe.hgetall(keys.series(hour))
    counts = {text(k): count(v) for batch in pipe.execute() for k, v in batch.items()}
    points = [
        Minute(
            minute=ms_time(m * 60_000) or now(redis),
            deliveries=counts.get(f"d:{m}", 0),
            rejected=counts.get(f"r:{m}", 0),
        )
        for m in range(first, now_minute + 1)
    ]
    peak = max((p.deliveries for p in points), default=0)
    return Series(minutes=minutes, peak_deliveries=peak, series=points)


def rejections(redis: Redis, limit: int = 100) -> list[Rejection]:
    """The latest rejections kept (newest first): never the body, only its hash and size."""
    return [_rejection(r) for r in redis.lrange(keys.REJECTIONS, 0, limit - 1)]


def _rejection(stored: bytes | str) -> Rejection:
    try:
        record = orjson.loads(stored)
    except orjson.JSONDecodeError:
        record = {}
    if not isinstance(record, dict):
        record = {}

    def optional_text(name: str) -> str | None:
        value = record.get(name)
        return None if value is None else str(value)

    return Rejection(
        at=ms_time(record.get("at")),
        reason=str(record.get("reason", "unreadable")),
        status=whole(record.get("status")),
        size=whole(record.get("size")),
        body_sha256=optional_text("sha256"),
        remote=optional_text("remote"),
        method=optional_text("method"),
    )
