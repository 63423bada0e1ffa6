"""Prometheus ``/metrics``: ledger figures read from Redis (so every process agrees) plus the
request latency histogram and the 503s counted in the process, aggregated across gunicorn
workers by the client's multiprocess mode when PROMETHEUS_MULTIPROC_DIR is set
(gunicorn.conf.py sets it). With Redis down it still answers: ``webhook_ledger_up 0`` and the
in-process metrics, so the 503s that Redis caused can be alerted on. What only the alerting
rules and the Grafana dashboard (deploy/) need is in webhook/metrics_alerting.py."""

import os
import time
from collections.abc import Iterator

from flask import Blueprint, Response, g, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from redis import Redis
from redis.exceptions import ConnectionError, TimeoutError

from ledger import keys, limits, reconcile
from ledger.read import fulfilment, secrets
from ledger.read import stats as read_stats
from ledger.settings import Settings
from ledger.stored import text
from webhook.http import require_ops, require_token
from webhook.metrics_alerting import UNAVAILABLE_RESPONSES, Family, gauge, watched
from webhook.metrics_reversal import reversal_families
from webhook.store import current_settings, get_redis

bp = Blueprint("metrics", __name__)
REQUEST_LATENCY = Histogram(
    "webhook_request_duration_seconds",
    "Time to answer a request to the Stripe endpoint, by status class.",
    ["status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)


class LedgerCollector(Collector):
    """Reads the shared counters from Redis at scrape time."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis, self.settings = redis, settings

    def collect(self) -> Iterator[Family]:
        try:
            families = [*self._ledger(), *watched(self.redis, self.settings)]
        except (ConnectionError, TimeoutError):  # unreachable, loading, no primary found
            yield gauge("webhook_ledger_up", "1 when the ledger's Redis answered this scrape.", 0)
            return
        yield gauge("webhook_ledger_up", "1 when the ledger's Redis answered this scrape.", 1)
        yield from families

    def _ledger(self) -> Iterator[Family]:
        s = read_stats.counters(self.redis)
        queued = self.redis.llen(keys.rq_queue(self.settings.QUEUE_NAME))
        deliveries = CounterMetricFamily(
            "webhook_deliveries", "Accepted deliveries, by event type.", labels=["type"]
        )
        for event_type, n in sorted(s.deliveries_by_type.items()):
            deliveries.add_metric([event_type], n)
        yield deliveries
        yield CounterMetricFamily("webhook_events", "Distinct events recorded.", value=s.events)
        yield CounterMetricFamily(
            "webhook_duplicates", "Deliveries of an event already recorded.", value=s.duplicates
        )
        yield CounterMetricFamily(
            "webhook_conflicts", "Deliveries with a known id but other bytes.", value=s.conflicts
        )
        states = GaugeMetricFamily("webhook_payments", "Payments by state.", labels=["state"])
        for state, n in s.payments_by_state.items():
            states.add_metric([state], n)
        yield states
        attempts = CounterMetricFamily(
            "webhook_fulfil_attempts", "Fulfilment attempts.", labels=["phase"]
        )
        attempts.add_metric(["started"], s.attempts_started)
        attempts.add_metric(["finished"], s.attempts_finished)
        yield attempts
        yield CounterMetricFamily(
            "webhook_fulfil_effects", "Payments recorded fulfilled.", value=s.effects
        )
        yield from reversal_families(self.redis, s.reversals)
        yield GaugeMetricFamily(
            "webhook_queue_depth", "Jobs waiting in the RQ queue.", value=queued
        )
        yield self._latency()
        yield from self._secrets()
        yield CounterMetricFamily(
            "webhook_reconciled_events",
            "Records from Stripe's API, not deliveries: events reconcile found, Checkout "
            "Sessions the landing page's trigger read, and PaymentIntents of payments only a "
            "thin event paid.",
            value=s.reconciled,
        )
        yield from self._reconcile()
        yield from self._gate()

    def _gate(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """The shared gate of fulfilment: pause, circuit breakers, call rate, who waits."""
        f = fulfilment.status(self.redis, self.settings)
        yield from self._breakers(fulfilment.breakers(f))
        yield GaugeMetricFamily(
            "webhook_fulfilment_paused",
            "1 while fulfilment is paused by a person (webhook-ledger fulfilment pause).",
            value=int(f.paused is not None),
        )
        if f.paused is not None and f.paused.since is not None:
            yield GaugeMetricFamily(
                "webhook_fulfilment_paused_since_timestamp_seconds",
                "When fulfilment was paused.",
                value=f.paused.since.timestamp(),
            )
        yield GaugeMetricFamily(
            "webhook_fulfilment_calls_last_second",
            "Downstream calls admitted in the last second, across every worker.",
            value=f.calls_last_second,
        )
        yield GaugeMetricFamily(
            "webhook_fulfilment_max_rate",
            "FULFILMENT_MAX_RATE: calls per second allowed across every worker (0: no limit).",
            value=f.max_rate,
        )
        waiting = GaugeMetricFamily(
            "webhook_fulfilment_waiting",
            "Payments waiting without a call (retrying, attempts not spent), by reason: "
            "paused, breaker, reversal_breaker, rate (the gate), stripe_api, checkout_session "
            "(their purchase).",
            labels=["reason"],
        )
        for reason, n in f.waiting.items():
            waiting.add_metric([reason], n)
        yield waiting
        stats = {text(k): int(v) for k, v in self.redis.hgetall(keys.STATS).items()}
        deferred = CounterMetricFamily(
            "webhook_fulfilment_deferred",
            "Times a job deferred its payment instead of calling, by reason: paused, "
            "breaker, reversal_breaker, rate (the gate), stripe_api, checkout_session (their "
            "purchase), job_timeout (its RQ timeout left no room for an attempt: due again "
            "at once).",
            labels=["reason"],
        )
        for reason in (*keys.WAIT_REASONS, *fulfilment.PURCHASE_WAITS, keys.JOB_TIMEOUT):
            deferred.add_metric([reason], stats.get(f"deferred:{reason}", 0))
        yield deferred
        yield CounterMetricFamily(
            "webhook_fulfil_attempts_refunded",
            "Attempts not counted against MAX_ATTEMPTS: never sent, or failed while the "
            "breaker was open.",
            value=stats.get("attempts_refunded", 0),
        )

    def _breakers(
        self, breakers: dict[str, fulfilment.Breaker]
    ) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """Each downstream's circuit breaker, by the action whose calls it gates: fulfilment
        (the reversal's too on the same downstream), reversal (on its own downstream)."""
        is_open = GaugeMetricFamily(
            "webhook_downstream_breaker_open",
            "1 while the downstream circuit breaker is open (no calls but one probe per "
            "cool-down), 0 when closed; by action: fulfilment, reversal (REVERSAL_ACTION's "
            "own downstream).",
            labels=["action"],
        )
        failures = GaugeMetricFamily(
            "webhook_downstream_breaker_failures",
            "Witnesses of a downstream outage the breaker counts since its last answer: payments "
            "refused (each once) and requests that never left (any worker).",
            labels=["action"],
        )
        opens = CounterMetricFamily(
            "webhook_downstream_breaker_opens", "Times the breaker opened.", labels=["action"]
        )
        probes = CounterMetricFamily(
            "webhook_downstream_breaker_probes", "Probe calls made while open.", labels=["action"]
        )
        for action, b in breakers.items():
            is_open.add_metric([action], int(b.state != "closed"))
            failures.add_metric([action], b.failures)
            opens.add_metric([action], b.opens)
            probes.add_metric([action], b.probes)
        yield from (is_open, failures, opens, probes)

    def _reconcile(self) -> Iterator[GaugeMetricFamily]:
        last = reconcile.runs(self.redis, 1)
        if not last:
            return
        run = last[0]
        yield GaugeMetricFamily(
            "webhook_reconcile_last_run_timestamp_seconds",
            "When the last reconcile run ended.",
            value=run.finished_at.timestamp() if run.finished_at else 0,
        )
        yield GaugeMetricFamily(
            "webhook_reconcile_missing",
            "Events Stripe listed that the ledger lacked, at the last reconcile run.",
            value=run.missing_total,
        )
        yield GaugeMetricFamily(
            "webhook_reconcile_failed",
            "1 when the last reconcile run could not read Stripe's Events API.",
            value=int(bool(run.error)),
        )

    def _secrets(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        s = self.settings
        rows = secrets.usage(self.redis, s.secret_labels, s.SECRET_RETIRE_AFTER_DAYS)
        verified = CounterMetricFamily(
            "webhook_secret_deliveries", "Deliveries verified, by secret label.", labels=["secret"]
        )
        seen = GaugeMetricFamily(
            "webhook_secret_last_seen_timestamp_seconds",
            "When the secret last verified a delivery.",
            labels=["secret"],
        )
        retire = GaugeMetricFamily(
            "webhook_secret_safe_to_retire",
            "1 when a configured secret has verified nothing for SECRET_RETIRE_AFTER_DAYS days "
            "while another one has verified deliveries since.",
            labels=["secret"],
        )
        for row in rows.secrets:
            verified.add_metric([row.label], row.deliveries)
            if row.last_seen_at is not None:
                seen.add_metric([row.label], row.last_seen_at.timestamp())
            if row.configured:
                retire.add_metric([row.label], int(row.status == "safe_to_retire"))
        yield from (verified, seen, retire)

    def _latency(self) -> HistogramMetricFamily:
        raw = {text(k): int(v) for k, v in self.redis.hgetall(keys.FULFIL_HISTOGRAM).items()}
        # Every le:{ms} field counts, also one a worker of another release wrote (a rolling
        # deploy, a rollback): each in the first bound at or above it, so +Inf and the count
        # never drop (Prometheus would read a drop as a counter reset).
        written = {int(k[3:]): n for k, n in raw.items() if k[3:].isdigit() and k[:3] == "le:"}
        cumulative, buckets = 0, []
        for bound in limits.FULFIL_BUCKETS_MS:
            cumulative = sum(n for ms, n in written.items() if ms <= bound)
            buckets.append((str(bound / 1000), cumulative))
        above = sum(n for ms, n in written.items() if ms > limits.FULFIL_BUCKETS_MS[-1])
        buckets.append(("+Inf", cumulative + above + raw.get("le:inf", 0)))
        return HistogramMetricFamily(
            "webhook_fulfil_latency_seconds",
            "First paid delivery to fulfilled.",
            buckets=buckets,
            sum_value=raw.get("sum_ms", 0) / 1000,
        )


@bp.before_app_request
def start_timer() -> None:
    g.started = time.perf_counter()


@bp.after_app_request
def observe(response: Response) -> Response:
    if request.endpoint == "receiver.stripe_webhook" and "started" in g:
        REQUEST_LATENCY.labels(f"{response.status_code // 100}xx").observe(
            time.perf_counter() - g.started
        )
    return response


@bp.get("/metrics")
def metrics() -> Response:
    s = current_settings()
    denied = require_token(s.METRICS_TOKEN, "Bearer") if s.METRICS_TOKEN else require_ops("Bearer")
    if denied:
        return denied
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        registry.register(REQUEST_LATENCY)
        registry.register(UNAVAILABLE_RESPONSES)
    registry.register(LedgerCollector(get_redis(), s))
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)
