"""Events and payments as people and programs read them: the typed views of ledger/views.py
built from the Redis hashes, for the ops API, the CLI, the dashboard, evidence bundles and
the replay tools. The figures (counters, workers, series, rejections) are ledger/figures.py;
attempts and a payment's timeline are read in ledger/timeline.py."""

from typing import Any

from redis import Redis

from ledger import keys, money
from ledger.clock import now_ms
from ledger.downstream import downstream_record
from ledger.payloads import decompress_payload
from ledger.settings import Settings
from ledger.stored import count, decode_hash, ms_time, optional, s_time, text, whole
from ledger.timeline import attempts_of, finished, receipt_of, resolution_of, timeline
from ledger.views import (
    DownstreamRecord,
    Event,
    EventRow,
    Payment,
    PaymentRow,
    RelatedObject,
)

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

MAX_SCAN = 20_000
"""Most index entries one filtered events query reads."""
EVENT_FIELDS = (
    "type",
    "n",
    "first",
    "last",
    "pk",
    "role",
    "paid",
    "origin",
    "secret",
    "livemode",
    "conflicts",
)


def _row_fields(event_id: str, f: dict[str, str]) -> dict[str, Any]:
    return {
        "id": event_id,
        "type": f.get("type", ""),
        "deliveries": count(f.get("n")),
        "first_recorded_at": ms_time(f.get("first")),
        "last_delivered_at": ms_time(f.get("last")),
        "payment_key": optional(f.get("pk")),
        "role": f.get("role") or "info",
        "pays": f.get("paid") == "1",
        "origin": "api" if f.get("origin") == "api" else "webhook",
        "secret_label": optional(f.get("secret")),
        "livemode": f.get("livemode") == "1",
        "conflicts": count(f.get("conflicts")),
    }


def event(redis: Redis, event_id: str, with_payload: bool = False) -> Event | None:
    """One event, its payload decompressed on request."""
    raw: dict[bytes, bytes] = redis.hgetall(keys.event(event_id))  # type: ignore[assignment]
    return event_record(event_id, raw, with_payload) if raw else None


def event_record(event_id: str, raw: dict[bytes, bytes], with_payload: bool = False) -> Event:
    f = decode_hash({k: v for k, v in raw.items() if k != b"body"})
    body = raw.get(b"body")
    related = None
    if f.get("rel_type"):
        related = RelatedObject(type=f["rel_type"], id=f.get("rel_id", ""))
    return Event(
        **_row_fields(event_id, f),
        created_at=s_time(f.get("created")),
        api_version=optional(f.get("api")),
        account=optional(f.get("account")),
        thin=f.get("thin") == "1",
        related_object=related,
        deliveries_by_source={k[4:]: count(v) for k, v in f.items() if k.startswith("src:")},
        confirmed_by_reconcile_at=ms_time(f.get("confirmed")),
        payload_sha256=f.get("sha", ""),
        delivered_payload_sha256=optional(f.get("delivered_sha")),
        conflicting_payload_sha256=optional(f.get("conflict_sha")),
        payload=decompress_payload(body).decode() if with_payload and body else None,
    )


def events(
    redis: Redis,
    event_type: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    offset: int = 0,
    limit: int = 50,
) -> list[EventRow]:
    """Latest events first, optionally of one type or within a time range (first record)."""
    high = until_ms if until_ms is not None else "+inf"
    low = since_ms if since_ms is not None else "-inf"
    found: list[EventRow] = []
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
            f = {k: text(v) for k, v in zip(EVENT_FIELDS, values, strict=True) if v is not None}
            if "n" not in f or (event_type and f.get("type") != event_type):
                continue  # expired since the index was read, or another type
            found.append(EventRow(**_row_fields(text(event_id), f)))
    return found[:limit] if event_type is None else found[offset : offset + limit]


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
    paid_by = f.get("paid_by") or _paid_by_n(f.get("paid_by_n", ""), event_ids)
    fields = {e: dict(zip(EVENT_FIELDS, v, strict=True)) for e, v in (event_fields or {}).items()}
    attempts = attempts_of(f)
    return Payment(
        **_payment_row_fields(payment_key, f, state_since),
        livemode=None if "livemode" not in f else f["livemode"] == "1",
        paid_by=paid_by,
        events=timeline(event_ids, fields, paid_by),
        attempts_finished=finished(attempts),
        attempts=attempts,
        receipt=receipt_of(f.get("receipt")),
        resolution=resolution_of(f.get("resolved_by")),
        same_purchase_as=optional(f.get("same_purchase_as")),
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
        downstream=_downstream(downstream, payment_key),
    )


def _paid_by_n(nth: str, event_ids: list[str]) -> str | None:
    """How payments recorded before ``paid_by`` named the event that paid them."""
    n = whole(nth)
    return event_ids[n - 1] if n is not None and 0 < n <= len(event_ids) else None


def _downstream(path: str | None, payment_key: str) -> DownstreamRecord | None:
    return downstream_record(path, payment_key) if path else None


def _payment_row_fields(pk: str, f: dict[str, str], since: object) -> dict[str, Any]:
    paid, done = ms_time(f.get("paid_at")), ms_time(f.get("fulfilled_at"))
    return {
        "payment_key": pk,
        "state": f.get("state", ""),
        "state_since": ms_time(whole(since)),
        "amount": money.amount(f.get("amount"), f.get("currency")),
        "deliveries": count(f.get("deliveries")),
        "attempts_started": count(f.get("token")),
        "paid_at": paid,
        "fulfilled_at": done,
        "paid_to_fulfilled_ms": _ms_between(f.get("paid_at"), f.get("fulfilled_at")),
        "last_error": optional(f.get("last_error")),
        "hold_reason": optional(f.get("hold_reason")),
        "waiting": optional(f.get("waiting")),
        "account": optional(f.get("account")),
    }


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
        rows.append(PaymentRow(**_payment_row_fields(pk, f, int(since))))
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
    "waiting",
    "account",
)
