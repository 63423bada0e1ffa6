"""The metrics that only the alerting rules and the Grafana dashboard (deploy/) need: how long
payments wait, how downstream calls end, the workers, the sweeper, the replicas, Redis's
memory, and the deliveries answered 503, counted in each process (Redis may be what failed)
and summed across gunicorn's workers by the client's multiprocess mode."""

from collections.abc import Iterator, Mapping
from typing import TypeVar

from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from redis import Redis
from redis.exceptions import (
    ConnectionError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TimeoutError,
)

from ledger import health
from ledger.read import stats
from ledger.replication import NotReplicated
from ledger.settings import Settings
from webhook.verify import SIGNATURE_REASONS

Family = CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily
Labelled = TypeVar("Labelled", CounterMetricFamily, GaugeMetricFamily)
UNAVAILABLE_REASONS = (
    "unreachable",
    "not_replicated",
    "too_few_replicas",
    "read_only",
    "out_of_memory",
    "cannot_persist",
    "other",
)
UNAVAILABLE_RESPONSES = Counter(
    "webhook_ledger_unavailable_responses",
    "Stripe deliveries answered 503 because the ledger could not record them, by reason.",
    ["reason"],
)
for _reason in UNAVAILABLE_REASONS:  # every series from the start, so rate() sees the first
    UNAVAILABLE_RESPONSES.labels(_reason)


def count_unavailable(cause: BaseException | None) -> None:
    """Count one delivery answered 503, by what Redis said (``cause``)."""
    UNAVAILABLE_RESPONSES.labels(unavailable_reason(cause)).inc()


def unavailable_reason(cause: BaseException | None) -> str:
    if isinstance(cause, NotReplicated):
        return "not_replicated"  # on the primary, but fewer replicas than LEDGER_MIN_REPLICAS
    if isinstance(cause, ReadOnlyError):
        return "read_only"  # a replica, or a primary being replaced
    if isinstance(cause, OutOfMemoryError):
        return "out_of_memory"  # maxmemory with noeviction
    if isinstance(cause, ConnectionError | TimeoutError):
        return "unreachable"
    if isinstance(cause, ResponseError) and str(cause).startswith("NOREPLICAS "):
        return "too_few_replicas"  # refused, not written: min-replicas-to-write not met
    if isinstance(cause, ResponseError) and str(cause).startswith("MISCONF "):
        return "cannot_persist"  # its last RDB save or AOF write failed (a full disk)
    return "other"


def watched(redis: Redis, settings: Settings) -> Iterator[Family]:
    """What the rules watch beside the ledger's counters, read from Redis at scrape time."""
    at = stats.now(redis)
    h = health.health(redis, at)
    w = stats.workers(redis, settings.QUEUE_NAME, at)
    rejected = CounterMetricFamily(
        "webhook_rejections",
        "Rejected requests, by reason. Counted in memory only between two sweeper passes, so"
        " a restart or failover of Redis may step them back: each Redis server's counts are"
        " a series of their own (ledger_run, its run_id), never read as a counter reset.",
        labels=["reason", "ledger_run"],
    )
    for reason, n in sorted(({r: 0 for r in SIGNATURE_REASONS} | h.rejected_by_reason).items()):
        rejected.add_metric([reason, h.run_id[:12]], n)
    yield rejected
    yield _by_label(
        GaugeMetricFamily(
            "webhook_payments_oldest_age_seconds",
            "Seconds the longest-waiting payment has been in this state (0: none is).",
            labels=["state"],
        ),
        h.oldest_age_s,
    )
    yield _by_label(
        CounterMetricFamily(
            "webhook_fulfil_attempt_outcomes",
            "Fulfilment attempts (downstream calls) by how they ended.",
            labels=["outcome"],
        ),
        h.attempt_outcomes,
    )
    yield gauge(
        "webhook_queue_oldest_age_seconds",
        "Seconds the oldest job in the RQ queue has waited (0: none waits).",
        w.oldest_queued_age_s or 0,
    )
    yield gauge(
        "webhook_workers_alive",
        "RQ workers of the queue with a recent heartbeat and a live Redis connection.",
        w.alive,
    )
    yield gauge("webhook_workers_busy", "Live workers running a job.", w.busy)
    yield gauge("webhook_workers_registered", "RQ workers registered.", w.registered)
    yield gauge("webhook_sweeper_due", "Payments due for the sweeper.", w.due_for_sweeper)
    yield _by_label(
        CounterMetricFamily(
            "webhook_jobs_requeued",
            "Payments' jobs enqueued again, by why: the sweeper found the job lost (lost_job:"
            " taken by a worker that died before its lease) or a retry due (retry), an"
            " expired lease re-run (lease_expired), a person's retry (operator).",
            labels=["reason"],
        ),
        h.requeued,
    )
    if h.sweeper_last_pass_at is not None:
        yield gauge(
            "webhook_sweeper_last_pass_timestamp_seconds",
            "When a sweeper last completed a pass.",
            h.sweeper_last_pass_at.timestamp(),
        )
    yield CounterMetricFamily(
        "webhook_sweeper_clock_steps",
        "Forward steps of Redis's clock a looping sweeper saw (it then ended no lease for one).",
        value=h.clock_steps,
    )
    if h.reconcile_interval_s is not None:
        yield gauge(
            "webhook_reconcile_interval_seconds",
            "RECONCILE_INTERVAL of the last looping sweeper pass (0: reconcile not scheduled).",
            h.reconcile_interval_s,
        )
    yield gauge(
        "webhook_ledger_min_replicas",
        "LEDGER_MIN_REPLICAS: replicas a write must reach before it counts.",
        settings.LEDGER_MIN_REPLICAS,
    )
    if h.replicas_online is not None:
        yield gauge(
            "webhook_ledger_replicas_online",
            "Replicas the ledger's primary lists online.",
            h.replicas_online,
        )
    if h.memory_used_bytes is not None:
        yield gauge("webhook_ledger_memory_used_bytes", "Redis's used_memory.", h.memory_used_bytes)
    if h.memory_max_bytes is not None:  # absent, not 0 (no limit), when INFO omits it
        yield gauge(
            "webhook_ledger_memory_max_bytes",
            "Redis's maxmemory (0: no limit); at it, writes are refused and deliveries get 503.",
            h.memory_max_bytes,
        )


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _by_label(family: Labelled, values: Mapping[str, float]) -> Labelled:
    """``family`` (with one label) holding one sample per key of ``values``."""
    for label, value in values.items():
        family.add_metric([label], value)
    return family
