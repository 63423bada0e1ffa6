"""Payments as people and programs read them: one payment with its timeline, and the
payments in a state (or all, or those that wait for a person), from the ``wl:pay:{key}``
hashes and the per-state indexes. PaymentState is the one list of payment states."""

from datetime import datetime
from typing import Any, Literal, cast, get_args

import msgspec
from redis import Redis

from ledger import keys
from ledger.clock import now_ms
from ledger.purchase import Purchase, email_of, purchase_of
from ledger.read.amounts import Amount, amount
from ledger.read.base import View
from ledger.read.downstream import DownstreamRecord, downstream_record
from ledger.read.events import EVENT_FIELDS
from ledger.read.late_parts import LatePart, came_after_fulfilment
from ledger.read.reversal import PaymentReversal, leg_of, payment_reversal, taken_back_now
from ledger.read.timeline import (
    Attempt,
    Leg,
    PaymentEvent,
    Resolution,
    attempts_of,
    finished,
    receipt_of,
    resolution_of,
    timeline,
)
from ledger.redact import mask_email
from ledger.settings import Settings
from ledger.stored import count, decode_hash, ms_time, optional, text, whole

PaymentState = Literal[
    "pending",
    "queued",
    "in_progress",
    "retrying",
    "fulfilled",
    "failed",
    "interrupted",
    "held",
    "refunded_unfulfilled",
    "reversed",
]
"""Every state a payment can be in (docs/LEDGER.md says what each means)."""
PAYMENT_STATES: tuple[PaymentState, ...] = get_args(PaymentState)
ATTENTION = "attention"
"""The pseudo-state of ``payments``: everything that waits for a person."""
ATTENTION_STATES: tuple[PaymentState, ...] = ("interrupted", "held", "failed")
"""States that wait for a person; a payment queued too long joins them."""
STATE_FILTERS = (*PAYMENT_STATES, ATTENTION)
"""What ``payments`` may be filtered by."""

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
    "waiting",
    "account",
    "p_cs_ref",
    "p_cs_email",
    "p_in_email",
    "p_pi_email",
    "p_ch_email",
    "leg",
    "rf",
    "rf_charge",
    "rf_charge_at",
    "rf_failed",
    "dispute",
    "fulfilled_by_hand",
)
"""What a row of the list reads of each payment hash."""


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
    """Null unless a worker's call fulfilled it: a person's word is no latency (as the
    summary's and the metrics' fulfil latency leave it out)."""
    fulfilled_by_hand: bool
    """A person marked it fulfilled (``resolve --fulfilled``, or granted by hand): its
    ``last_error``, if any, is of a call before that word."""
    last_error: str | None
    hold_reason: str | None
    waiting: str | None
    """Why a retrying payment waits without a call: paused, breaker, reversal_breaker (the
    breaker of REVERSAL_ACTION's own downstream) or rate (the gate),
    stripe_api (its line items) or checkout_session (its session's event), both
    ledger/purchase_reads.py; no attempt spent."""
    account: str | None
    client_reference_id: str | None
    """The Checkout Session's: the merchant's own order id, if it gave one."""
    customer_email: str | None
    """Masked (``j***@example.com``): a list shows no whole email; the payment's purchase does."""
    leg: Leg
    """What its state is about: ``fulfil`` (its fulfilment), ``reverse`` (its reversal, once
    due: queued, running, retrying, failed, interrupted, reversed, or held after a dispute won
    after it) or ``refulfil`` (its fulfilment again after that dispute won)."""
    taken_back: str | None
    """``refund`` (refunded in full; with no paid record, any refund) or ``dispute`` (a dispute
    lost) while Stripe takes it back now, whatever its state (given back since: null): an
    interrupted one's person decides knowing it."""


class Payment(PaymentRow):
    livemode: bool | None
    paid_by: str | None
    events: list[PaymentEvent]
    attempts_finished: int
    attempts: list[Attempt]
    receipt: dict[str, Any] | None
    resolution: Resolution | None
    same_purchase_as: str | None
    by_hand: bool
    """Held for a person to act by hand: grant it (Stripe gave it back after it was taken
    back), or take it back (taken back again after it was granted again:
    ``reversal.taken_back_again``). A retry runs nothing, only a resolve."""
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
    purchase: Purchase
    """What was bought, as the payment hash holds it now: what an attempt from now on gets
    (token: the last attempt's). The call that fulfilled it may have had less:
    ``came_after_fulfilment``."""
    came_after_fulfilment: list[LatePart]
    """The parts of ``purchase`` (the Checkout Session, the invoice, the PaymentIntent) whose
    every event was first recorded after the attempt that fulfilled it started: its call had
    none of them (ledger/read/late_parts.py)."""
    reversal: PaymentReversal | None
    """Its refunds and dispute, and its reversal (docs/REVERSAL.md); null when none came."""


class PaymentList(View):
    payments: list[PaymentRow]
    state: str | None
    offset: int
    limit: int


def payment(redis: Redis, payment_key: str, downstream: str | None = None) -> Payment | None:
    """One payment with its timeline: events, attempts and (with the SQLite file of the
    built-in downstream) the downstream's own record."""
    raw: dict[bytes, bytes] = redis.hgetall(keys.payment(payment_key))  # type: ignore[assignment]
    if not raw:
        return None
    f = decode_hash(raw)
    pipe = redis.pipeline(transaction=False)
    pipe.zscore(keys.state_index(f.get("state", "")), payment_key)
    event_ids = f.get("events", "").split()
    for event_id in event_ids:
        pipe.hmget(keys.event(event_id), EVENT_FIELDS)
    since, *event_fields = pipe.execute()
    return payment_record(
        payment_key, f, since, dict(zip(event_ids, event_fields, strict=True)), downstream
    )


def payment_record(
    payment_key: str,
    f: dict[str, str],
    state_since: object = None,
    event_fields: dict[str, list[object]] | None = None,
    downstream: str | None = None,
) -> Payment:
    """A payment hash (decoded) as people read it."""
    event_ids = f.get("events", "").split()
    paid_by = optional(f.get("paid_by"))
    fields = {e: dict(zip(EVENT_FIELDS, v, strict=True)) for e, v in (event_fields or {}).items()}
    attempts = attempts_of(f)
    events = timeline(event_ids, fields, paid_by)
    row = payment_row(payment_key, f, state_since)
    return Payment(
        **msgspec.structs.asdict(row),
        livemode=None if "livemode" not in f else f["livemode"] == "1",
        paid_by=paid_by,
        events=events,
        attempts_finished=finished(attempts),
        attempts=attempts,
        receipt=receipt_of(f.get("receipt")),
        resolution=resolution_of(f),
        same_purchase_as=optional(f.get("same_purchase_as")),
        by_hand=f.get("state") == "held" and bool(f.get("by_hand")),
        last_failed_event_type=optional(f.get("last_failed")),
        last_refund_event_type=optional(f.get("last_refund")),
        lease_until=ms_time(f.get("lease_until")),
        phase=optional(f.get("phase")),
        next_attempt_at=ms_time(f.get("next_at")),
        job_id=optional(f.get("job")),
        leases_expired=count(f.get("leases_expired")),
        stale_finishes=count(f.get("stale_finishes")),
        job_failures=count(f.get("job_failures")),
        jobs_skipped={k[8:]: count(v) for k, v in f.items() if k.startswith("skipped:")},
        last_skip=optional(f.get("last_skip")),
        downstream=downstream_record(downstream, payment_key) if downstream else None,
        purchase=purchase_of(payment_key, count(f.get("token")), f),
        came_after_fulfilment=came_after_fulfilment(events, attempts, f),
        reversal=payment_reversal(payment_key, f, events),
    )


def payment_row(payment_key: str, f: dict[str, str], state_since: object) -> PaymentRow:
    """A row of the list from the PAYMENT_FIELDS of one payment hash (decoded). The state is
    passed on as stored: a hash written by hand may hold any text there."""
    by_hand = bool(f.get("fulfilled_by_hand"))
    return PaymentRow(
        payment_key=payment_key,
        state=cast(PaymentState, f.get("state", "")),
        state_since=ms_time(whole(state_since)),
        amount=amount(f.get("amount"), f.get("currency")),
        deliveries=count(f.get("deliveries")),
        attempts_started=count(f.get("token")),
        paid_at=ms_time(f.get("paid_at")),
        fulfilled_at=ms_time(f.get("fulfilled_at")),
        paid_to_fulfilled_ms=None
        if by_hand
        else _ms_between(f.get("paid_at"), f.get("fulfilled_at")),
        fulfilled_by_hand=by_hand,
        last_error=optional(f.get("last_error")),
        hold_reason=optional(f.get("hold_reason")),
        waiting=optional(f.get("waiting")),
        account=optional(f.get("account")),
        client_reference_id=optional(f.get("p_cs_ref")),
        customer_email=mask_email(email_of(f)),
        leg=leg_of(f),
        taken_back=taken_back_now(f),
    )


def _ms_between(start: object, end: object) -> int | None:
    a, b = whole(start), whole(end)
    return b - a if a is not None and b is not None else None


def payments(
    redis: Redis,
    state: str | None = None,
    offset: int = 0,
    limit: int = 50,
    stuck_after_s: int = Settings.STUCK_QUEUED_SECONDS,
) -> list[PaymentRow]:
    """Payments, most recent state change first; all states merged when ``state`` is None;
    ``attention``: the ones that need a person (ATTENTION_STATES, and queued too long)."""
    states = [state] if state else list(PAYMENT_STATES)
    if state == ATTENTION:
        states = list(ATTENTION_STATES)
    pipe = redis.pipeline(transaction=False)
    for s in states:
        pipe.zrevrange(keys.state_index(s), 0, offset + limit - 1, withscores=True)
    if state == ATTENTION:
        stuck_before = now_ms(redis) - stuck_after_s * 1000
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
        f = {k: text(v) for k, v in zip(PAYMENT_FIELDS, values, strict=True) if v is not None}
        rows.append(payment_row(pk, f, int(since)))
    return rows
