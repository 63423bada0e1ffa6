"""The ledger as people and programs read it: one typed object per thing shown.

The ops API, ``webhook-ledger --json``, the dashboard, evidence bundles and the replay report
all show these objects, built once from the Redis records by ledger/queries.py and
ledger/figures.py (what is stored does not change: hashes of strings, JSON inside strings,
epoch milliseconds). Here times are aware UTC datetimes (ISO-8601 with ``Z`` in JSON), amounts
are integer minor units with their currency, counts are integers, attempts are objects and
secrets are named by label. webhook/openapi.yaml documents every field; a test checks that
its schemas are exactly these classes'.
"""

from datetime import datetime
from typing import Any, Literal

import msgspec

PaymentState = Literal[
    "pending", "queued", "in_progress", "retrying", "fulfilled", "failed", "interrupted", "held"
]
SecretStatus = Literal["in_use", "safe_to_retire", "idle", "never_seen", "not_configured"]


class View(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Every field is always present (null when there is nothing); no other field is."""


class Amount(View):
    minor_units: int
    currency: str
    exponent: int
    formatted: str


class EventRow(View):
    id: str
    type: str
    deliveries: int
    first_recorded_at: datetime | None
    last_delivered_at: datetime | None
    payment_key: str | None
    role: str
    pays: bool
    origin: Literal["webhook", "api"]
    secret_label: str | None
    livemode: bool
    conflicts: int


class RelatedObject(View):
    type: str
    id: str


class Event(EventRow):
    created_at: datetime | None
    api_version: str | None
    account: str | None
    thin: bool
    related_object: RelatedObject | None
    deliveries_by_source: dict[str, int]
    confirmed_by_reconcile_at: datetime | None
    payload_sha256: str
    delivered_payload_sha256: str | None
    conflicting_payload_sha256: str | None
    payload: str | None


class EventList(View):
    events: list[EventRow]
    offset: int
    limit: int


class PaymentEvent(View):
    id: str
    expired: bool
    type: str | None
    role: str | None
    pays: bool
    paid_the_payment: bool
    deliveries: int | None
    first_recorded_at: datetime | None
    last_delivered_at: datetime | None


class Attempt(View):
    token: int
    outcome: str
    started_at: datetime | None
    call_started_at: datetime | None
    ended_at: datetime | None
    duration_ms: int | None
    call_ms: float | None
    error: str | None
    late: bool
    phase_at_expiry: str | None
    stale_outcome: str | None
    stale_at: datetime | None
    caller: str | None
    """The worker process that was fenced to call (``host:pid:nonce``)."""


class Resolution(View):
    by: str
    at: datetime | None
    decision: str | None
    from_state: str | None


class DownstreamRecord(View):
    calls: int
    applied: int
    already_applied: int
    effects: int


class PaymentRow(View):
    payment_key: str
    state: PaymentState
    state_since: datetime | None
    amount: Amount | None
    deliveries: int
    attempts_started: int
    paid_at: datetime | None
    fulfilled_at: datetime | None
    paid_to_fulfilled_ms: int | None
    last_error: str | None
    hold_reason: str | None
    waiting: str | None
    """Why a retrying payment waits without a call: paused, breaker or rate (no attempt spent)."""
    account: str | None


class Payment(PaymentRow):
    livemode: bool | None
    paid_by: str | None
    events: list[PaymentEvent]
    attempts_finished: int
    attempts: list[Attempt]
    receipt: dict[str, Any] | None
    resolution: Resolution | None
    same_purchase_as: str | None
    last_failed_event_type: str | None
    last_refund_event_type: str | None
    lease_until: datetime | None
    phase: str | None
    next_attempt_at: datetime | None
    job_id: str | None
    leases_expired: int
    stale_finishes: int
    job_failures: int
    jobs_skipped: dict[str, int]
    last_skip: str | None
    downstream: DownstreamRecord | None


class PaymentList(View):
    payments: list[PaymentRow]
    state: str | None
    offset: int
    limit: int


class PaymentStates(View):
    pending: int
    queued: int
    in_progress: int
    retrying: int
    fulfilled: int
    failed: int
    interrupted: int
    held: int


class Counters(View):
    deliveries: int
    events: int
    duplicates: int
    conflicts: int
    rejected: int
    reconciled: int
    effects: int
    attempts_started: int
    attempts_finished: int
    rejected_by_reason: dict[str, int]
    deliveries_by_source: dict[str, int]
    deliveries_by_secret: dict[str, int]
    deliveries_by_type: dict[str, int]
    payments_by_state: PaymentStates


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


class Pause(View):
    since: datetime | None
    by: str
    reason: str


class Breaker(View):
    state: Literal["closed", "open", "probing"]
    failures: int
    threshold: int
    cooldown_s: float
    opened_at: datetime | None
    open_until: datetime | None
    last_error: str | None
    opens: int
    probes: int


class Fulfilment(View):
    paused: Pause | None
    resumed_at: datetime | None
    resumed_by: str | None
    breaker: Breaker
    max_rate: int
    calls_last_second: int
    waiting: dict[str, int]


class Summary(Counters):
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


class Rejection(View):
    at: datetime | None
    reason: str
    status: int | None
    size: int | None
    body_sha256: str | None
    remote: str | None
    method: str | None


class RejectionList(View):
    rejections: list[Rejection]
    limit: int


class SecretUsage(View):
    label: str
    shown_as: str
    configured: bool
    deliveries: int
    last_seen_at: datetime | None
    status: SecretStatus


class SecretList(View):
    retire_after_days: int
    secrets: list[SecretUsage]


class MissingEvent(View):
    id: str
    type: str
    payment_key: str | None
    pays: bool
    created_at: datetime | None


class ReconcileRun(View):
    started_at: datetime | None
    finished_at: datetime | None
    window_start: datetime | None
    trigger: str
    applied: bool
    every_event: bool
    listed: int
    missing_total: int
    by_type: dict[str, int]
    payments: list[str]
    missing: list[MissingEvent]
    recorded: int
    arrived: int
    enqueued: int
    unreadable: int
    error: str | None


class ReconcileList(View):
    interval_s: float
    runs: list[ReconcileRun]


class Decision(View):
    payment_key: str
    state: PaymentState


class BulkDecision(View):
    action: str
    state: str
    since: str | None
    error: str | None
    dry_run: bool
    matched: int
    requeued: int
    """Re-queued by this run: a payment another run (or a worker) moved first is not."""
    still_running: int
    """Interrupted payments left alone: their last call may still be running (try later)."""
    payment_keys: list[str]
    """The first 100: matched on a dry run, re-queued otherwise."""


class Problem(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """An error answer: ``error`` for programs, ``message`` for people, and what applies."""

    error: str
    message: str
    allowed: list[str] | None = None
    state: str | None = None
    retry_after: datetime | None = None


RESPONSES: tuple[type, ...] = (
    Summary,
    EventList,
    Event,
    PaymentList,
    Payment,
    RejectionList,
    Series,
    SecretList,
    ReconcileList,
    Decision,
    BulkDecision,
    Fulfilment,
    Problem,
)
"""What the ops API answers; webhook/openapi.yaml's schemas are these and what they hold."""


def to_json(view: object, indent: bool = False) -> bytes:
    """A view (or a list of views) as JSON, as the API and ``--json`` print it."""
    data = msgspec.json.encode(view)
    return msgspec.json.format(data, indent=2) if indent else data


def to_builtins(view: object) -> Any:
    """A view as plain dicts, lists, strings and numbers (times as ISO-8601 strings)."""
    return msgspec.to_builtins(view)
