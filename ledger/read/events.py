"""Events as people and programs read them: one event (with its payload on request) and the
latest events, from the ``wl:evt:{id}`` hashes and the index of first records."""

from datetime import datetime
from typing import Literal

from redis import Redis

from ledger import keys
from ledger.payloads import decompress_payload
from ledger.read.base import View
from ledger.stored import count, decode_hash, ms_time, optional, s_time, text

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
"""What a row of the list (and a payment's timeline) reads of each event hash."""


SESSION_RECORD = "checkout.session.retrieved"
"""A Checkout Session read from Stripe's API for the landing page's trigger (ledger/landing.py)."""
INTENT_RECORD = "payment_intent.retrieved"
"""A thin-paid payment's PaymentIntent read by a worker (ledger/purchase_reads.py)."""


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

    @property
    def recorded_from(self) -> str:
        """Where the record came from, as people read it."""
        if self.origin != "api":
            return "webhook"
        if self.type == SESSION_RECORD:
            return "Stripe's API: the Checkout Session, read for the landing page's trigger"
        if self.type == INTENT_RECORD:
            return "Stripe's API: the PaymentIntent its thin event paid, read by a worker"
        return "Stripe's Events API (reconcile)"


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


def event_row(event_id: str, f: dict[str, str]) -> EventRow:
    """A row of the list from the EVENT_FIELDS of one event hash (decoded)."""
    return EventRow(
        id=event_id,
        type=f.get("type", ""),
        deliveries=count(f.get("n")),
        first_recorded_at=ms_time(f.get("first")),
        last_delivered_at=ms_time(f.get("last")),
        payment_key=optional(f.get("pk")),
        role=f.get("role") or "info",
        pays=f.get("paid") == "1",
        origin="api" if f.get("origin") == "api" else "webhook",
        secret_label=optional(f.get("secret")),
        livemode=f.get("livemode") == "1",
        conflicts=count(f.get("conflicts")),
    )


def event(redis: Redis, event_id: str, with_payload: bool = False) -> Event | None:
    """One event, its payload decompressed on request."""
    raw: dict[bytes, bytes] = redis.hgetall(keys.event(event_id))  # type: ignore[assignment]
    return event_record(event_id, raw, with_payload) if raw else None


def event_record(event_id: str, raw: dict[bytes, bytes], with_payload: bool = False) -> Event:
    """An event hash (as Redis answers it) as people read it."""
    f = decode_hash({k: v for k, v in raw.items() if k != b"body"})
    body = raw.get(b"body")
    related = None
    if f.get("rel_type"):
        related = RelatedObject(type=f["rel_type"], id=f.get("rel_id", ""))
    row = event_row(event_id, f)
    return Event(
        id=row.id,
        type=row.type,
        deliveries=row.deliveries,
        first_recorded_at=row.first_recorded_at,
        last_delivered_at=row.last_delivered_at,
        payment_key=row.payment_key,
        role=row.role,
        pays=row.pays,
        origin=row.origin,
        secret_label=row.secret_label,
        livemode=row.livemode,
        conflicts=row.conflicts,
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
            found.append(event_row(text(event_id), f))
    return found[:limit] if event_type is None else found[offset : offset + limit]
