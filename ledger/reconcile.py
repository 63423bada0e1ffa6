"""Reconcile the ledger with Stripe's Events API: what Stripe has that the ledger lacks.

Stripe stops retrying a delivery after about three days; its Events API keeps events 30
days. A run lists the events created in a window (by default only those Stripe did not
deliver to every endpoint), reports the ones the ledger has no record of, by type and
payment, and with ``apply`` records them through the ledger script as source ``api``: created
as a delivery would create them, counted as none, so a paid one fulfils exactly once like any
other. The script decides atomically, so runs may overlap each other and intake.
"""

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Any

import orjson
import stripe
from redis import Redis
from stripe.params import EventListParams

from ledger import keys, limits
from ledger.clock import duration_s, now_ms
from ledger.deliveries import API_SOURCE, Delivery, Ledger, new_request_id
from ledger.event_shape import NotAStripeEvent, check_shape
from ledger.events import classify
from ledger.read.reconcile import MissingEvent, ReconcileRun
from ledger.redact import redact
from ledger.stored import count, ms_time, s_time
from ledger.stripe_api import stripe_client

PAGE = 100
"""Events per request: the most Stripe's list endpoints return."""


@dataclass
class Run:
    """One reconcile run, as stored and shown."""

    started_ms: int
    since: int
    """Window start (epoch seconds): events created at or after it were listed."""
    applied: bool
    every_event: bool
    """False: only events Stripe did not deliver to every endpoint (``delivery_success``)."""
    trigger: str
    listed: int = 0
    missing: list[dict[str, Any]] = field(default_factory=list)
    """Events the ledger lacked: id, type, payment, paid, created."""
    by_type: dict[str, int] = field(default_factory=dict)
    recorded: int = 0
    """Recorded by this run (``apply``)."""
    arrived: int = 0
    """Missing when listed, but recorded by a delivery before this run's write."""
    enqueued: int = 0
    unreadable: int = 0
    """Listed events without an ``evt_`` id, a type or ``data.object`` (never recorded)."""
    finished_ms: int = 0
    error: str = ""

    def as_dict(self, missing_kept: int | None = None) -> dict[str, Any]:
        data = asdict(self)
        data["missing"] = self.missing[:missing_kept]
        data["missing_total"] = len(self.missing)
        data["payments"] = sorted({m["payment"] for m in self.missing if m["payment"]})
        return data


def window_s(retention_days: int, since: str | None = None) -> int:
    """Seconds to look back: ``since``, by default all that both the ledger and Stripe keep."""
    most = min(retention_days, limits.STRIPE_EVENTS_KEPT_DAYS) * 86400
    if since is None:
        return most
    seconds = duration_s(since)
    # Past the retention an event's record may have expired: it would be recorded again.
    if seconds > retention_days * 86400:
        raise ValueError(
            f"--since {since} reaches past EVENT_RETENTION_DAYS={retention_days}: the ledger no "
            "longer holds those events, so they would all look missing"
        )
    return min(seconds, limits.STRIPE_EVENTS_KEPT_DAYS * 86400)


def stripe_events(api_key: str, api_base: str, since: int, every_event: bool) -> Iterator[Any]:
    """Events created at or after ``since``, newest first, every page followed."""
    client = stripe_client(api_key, api_base, retries=2)
    params: EventListParams = {"created": {"gte": since}, "limit": PAGE}
    if not every_event:
        params["delivery_success"] = False
    yield from client.v1.events.list(params).auto_paging_iter()


def reconcile(
    ledger: Ledger, window: int, apply: bool, every_event: bool = False, trigger: str = "cli"
) -> Run:
    """List, compare and (with ``apply``) record; the run is stored whatever happens."""
    redis, s = ledger.redis, ledger.settings
    started = now_ms(redis)
    run = Run(
        started_ms=started,
        since=started // 1000 - window,
        applied=apply,
        every_event=every_event,
        trigger=trigger,
    )
    try:
        listed = stripe_events(s.STRIPE_API_KEY, s.STRIPE_API_BASE, run.since, every_event)
        for page in _pages(listed):
            run.listed += len(page)
            for event in _absent(redis, page):
                _missing(run, ledger, event)
    except stripe.StripeError as exc:
        run.error = redact(f"{type(exc).__name__}: {exc}")
    run.finished_ms = now_ms(redis)
    store(redis, run)
    return run


def _pages(events: Iterable[Any]) -> Iterator[list[dict[str, Any]]]:
    it = iter(events)
    while page := list(islice(it, PAGE)):
        yield [e.to_dict(for_json=True) for e in page]


def _absent(redis: Redis, page: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of ``page`` the ledger has no record of (anything unreadable included)."""
    pipe = redis.pipeline(transaction=False)
    for event in page:
        pipe.exists(keys.event(str(event.get("id"))))
    return [e for e, known in zip(page, pipe.execute(), strict=True) if not known]


def _missing(run: Run, ledger: Ledger, event: dict[str, Any]) -> None:
    """Report one event the ledger lacks; with ``apply``, record it as source ``api``."""
    try:
        check_shape(event)
    except NotAStripeEvent:
        run.unreadable += 1
        return
    c = classify(event, ledger.settings.policy)
    run.by_type[event["type"]] = run.by_type.get(event["type"], 0) + 1
    run.missing.append(
        {
            "id": event["id"],
            "type": event["type"],
            "payment": c.payment_key or "",
            "paid": c.paid,
            "created": event.get("created"),
        }
    )
    if run.applied:
        body = orjson.dumps(event)
        recorded = ledger.record_delivery(
            Delivery(event, body, c, "", API_SOURCE, new_request_id())
        )
        if recorded.duplicate:
            run.arrived += 1  # a delivery recorded it after this run listed it
        else:
            run.recorded += 1
        if recorded.enqueued:
            run.enqueued += 1


def store(redis: Redis, run: Run) -> None:
    """Keep the run (newest first, capped) for the dashboard, the API and /metrics."""
    with redis.pipeline() as pipe:
        pipe.lpush(keys.RECONCILE_RUNS, orjson.dumps(run.as_dict(limits.RECONCILE_MISSING_KEPT)))
        pipe.ltrim(keys.RECONCILE_RUNS, 0, limits.RECONCILE_RUNS_KEPT - 1)
        pipe.execute()


def runs(redis: Redis, limit: int = 10) -> list[ReconcileRun]:
    """The latest stored runs, newest first."""
    return [view(orjson.loads(r)) for r in redis.lrange(keys.RECONCILE_RUNS, 0, limit - 1)]


def view(stored: dict[str, Any]) -> ReconcileRun:
    """A run as stored (``Run.as_dict``: epoch times) as people read it."""
    return ReconcileRun(
        started_at=ms_time(stored.get("started_ms")),
        finished_at=ms_time(stored.get("finished_ms")),
        window_start=s_time(stored.get("since")),
        trigger=str(stored.get("trigger", "")),
        applied=bool(stored.get("applied")),
        every_event=bool(stored.get("every_event")),
        listed=count(stored.get("listed")),
        missing_total=count(stored.get("missing_total")),
        by_type={str(k): count(v) for k, v in (stored.get("by_type") or {}).items()},
        payments=[str(p) for p in stored.get("payments") or []],
        missing=[
            MissingEvent(
                id=str(m.get("id", "")),
                type=str(m.get("type", "")),
                payment_key=m.get("payment") or None,
                pays=bool(m.get("paid")),
                created_at=s_time(m.get("created")),
            )
            for m in stored.get("missing") or []
        ],
        recorded=count(stored.get("recorded")),
        arrived=count(stored.get("arrived")),
        enqueued=count(stored.get("enqueued")),
        unreadable=count(stored.get("unreadable")),
        error=stored.get("error") or None,
    )


def claim(redis: Redis, interval: float) -> bool:
    """Whether this sweeper runs reconcile now: one per interval, however many sweepers run."""
    return bool(redis.set(keys.RECONCILE_SLOT, "1", nx=True, px=max(1, int(interval * 1000))))
