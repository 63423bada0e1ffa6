"""The ledger's figures: counters, the summary (with fulfil latency over a recent window, the
workers seen alive and the gate of fulfilment) and deliveries per minute. One reader for
the ops API, the CLI, the dashboard, /metrics and the replay report, so their counts
agree."""

import math
from datetime import datetime

from redis import Redis
from redis.exceptions import ResponseError
from rq import Queue, Worker
from rq.defaults import DEFAULT_WORKER_TTL

from ledger import keys, limits
from ledger.clock import now_ms
from ledger.health import oldest_waiting
from ledger.read.base import View
from ledger.read.fulfilment import Fulfilment, status
from ledger.read.payments import PAYMENT_STATES, PaymentState
from ledger.read.reversal_counts import (
    NeedsAPerson,
    ReversalCounts,
    needs_a_person,
    reversal_counts,
)
from ledger.settings import Settings
from ledger.stored import count, counts_of, decode_hash, ms_time, text, whole

HEARTBEAT_WINDOW_S = DEFAULT_WORKER_TTL + 60
"""An RQ worker heartbeats at least this often, also while idle (blocked on its queue for
worker_ttl - 15 s), and RQ lets its registration expire after this long without one."""


class Counters(View):
    deliveries: int
    events: int
    duplicates: int
    conflicts: int
    rejected: int
    reconciled: int
    """Events recorded from Stripe's Events API, not delivered (no delivery)."""
    effects: int
    attempts_started: int
    attempts_finished: int
    rejected_by_reason: dict[str, int]
    deliveries_by_source: dict[str, int]
    deliveries_by_secret: dict[str, int]
    deliveries_by_type: dict[str, int]
    payments_by_state: dict[PaymentState, int]
    """Every state of PAYMENT_STATES, in that order."""
    reversals: ReversalCounts


class Latency(View):
    window_s: int
    payments: int
    p50_ms: int | None
    p90_ms: int | None
    p99_ms: int | None


class Workers(View):
    queue_length: int
    oldest_queued_age_s: float | None
    alive: int
    busy: int
    registered: int
    heartbeat_window_s: int
    due_for_sweeper: int
    sweeper_passes: int
    sweeper_last_pass_at: datetime | None


class Summary(Counters):
    needs_a_person: NeedsAPerson
    oldest_waiting_s: dict[str, float]
    """Per unfinished state, seconds since its longest-waiting payment entered it (0: none):
    the figure WebhookFulfilmentStalled's oldest_waiting signal reads."""
    at: datetime
    fulfil_latency: Latency
    workers: Workers
    fulfilment: Fulfilment


class Minute(View):
    minute: datetime
    deliveries: int
    rejected: int


class Series(View):
    minutes: int
    peak_deliveries: int
    series: list[Minute]


def counters(redis: Redis) -> Counters:
    """Global counters, deliveries and rejections by kind, payments by state."""
    pipe = redis.pipeline(transaction=False)
    pipe.hgetall(keys.STATS)
    pipe.hgetall(keys.PAYMENT_STATE_COUNTS)
    stats_raw, states_raw = pipe.execute()
    return counters_from(decode_hash(stats_raw), decode_hash(states_raw))


def counters_from(stats: dict[str, str], states: dict[str, str]) -> Counters:
    return Counters(
        deliveries=count(stats.get("deliveries")),
        events=count(stats.get("events")),
        duplicates=count(stats.get("duplicates")),
        conflicts=count(stats.get("conflicts")),
        rejected=count(stats.get("rejected")),
        reconciled=count(stats.get("reconciled")),
        effects=count(stats.get("effects")),
        attempts_started=count(stats.get("attempts_started")),
        attempts_finished=count(stats.get("attempts_finished")),
        rejected_by_reason=counts_of(stats, "rejected"),
        deliveries_by_source=counts_of(stats, "source"),
        deliveries_by_secret=counts_of(stats, "secret"),
        deliveries_by_type=counts_of(stats, "type"),
        payments_by_state={s: count(states.get(s)) for s in PAYMENT_STATES},
        reversals=reversal_counts(stats),
    )


def now(redis: Redis) -> datetime:
    """Redis's clock, the one every stored time was taken from."""
    moment = ms_time(now_ms(redis))
    assert moment is not None
    return moment


def summary(
    redis: Redis, settings: Settings, window_s: int = limits.LATENCY_WINDOW_SECONDS
) -> Summary:
    """Counters, fulfil latency over the last ``window_s`` seconds, queue and workers, and
    the shared gate of fulfilment (pause, breaker, rate, who waits)."""
    at, c = now(redis), counters(redis)
    return Summary(
        deliveries=c.deliveries,
        events=c.events,
        duplicates=c.duplicates,
        conflicts=c.conflicts,
        rejected=c.rejected,
        reconciled=c.reconciled,
        effects=c.effects,
        attempts_started=c.attempts_started,
        attempts_finished=c.attempts_finished,
        rejected_by_reason=c.rejected_by_reason,
        deliveries_by_source=c.deliveries_by_source,
        deliveries_by_secret=c.deliveries_by_secret,
        deliveries_by_type=c.deliveries_by_type,
        payments_by_state=c.payments_by_state,
        reversals=c.reversals,
        needs_a_person=needs_a_person(redis),
        oldest_waiting_s=oldest_waiting(redis, at),
        at=at,
        fulfil_latency=latency(redis, at, window_s),
        workers=workers(redis, settings.QUEUE_NAME, at),
        fulfilment=status(redis, settings),
    )


def percentiles(samples: list[int], points: tuple[int, ...] = (50, 90, 99)) -> list[int | None]:
    """Nearest-rank percentiles of ``samples`` (None each when there are none)."""
    ordered = sorted(samples)
    return [
        ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else None for p in points
    ]


def latency(redis: Redis, at: datetime, window_s: int) -> Latency:
    """First paid delivery to fulfilled, of the payments a worker fulfilled in the window
    (the latest LATENCY_SAMPLES of them, still fulfilled): an old backlog leaves the figures
    once it is older than the window. Payments a person marked fulfilled are not counted;
    one a person retried and a worker then fulfilled is, with the wait for that person, as
    the histogram (webhook_fulfil_latency_seconds) counts it."""
    until_ms = int(at.timestamp() * 1000)
    recent = redis.zrevrangebyscore(
        keys.state_index("fulfilled"),
        until_ms,
        until_ms - window_s * 1000,
        start=0,
        num=limits.LATENCY_SAMPLES,
    )
    pipe = redis.pipeline(transaction=False)
    for pk in recent:
        pipe.hmget(keys.payment(text(pk)), ("paid_at", "fulfilled_at", "fulfilled_by_hand"))
    samples = []
    for paid, done, by_hand in pipe.execute() if recent else []:
        start, end = whole(paid), whole(done)
        if start is not None and end is not None and by_hand is None:
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
