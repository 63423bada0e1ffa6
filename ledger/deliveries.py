"""The delivery ledger: Lua scripts that record deliveries and rejections in Redis.

Each accepted delivery is one FCALL of ``lua/record_delivery.lua`` (a Redis Function):
the event record, the global counters, the payment record and (for the first paid event
of a payment) the RQ job are written together or not at all.
"""

import hashlib
import os
from dataclasses import dataclass
from typing import Any

import orjson
from redis import Redis
from redis.exceptions import RedisError

from ledger import keys
from ledger.enqueue import NO_JOB, Jobs
from ledger.event_shape import data_object, is_thin, related
from ledger.events import Classified
from ledger.money import paid_amount
from ledger.payloads import compress_payload
from ledger.purchase_fields import encode_fields, purchase_fields
from ledger.replication import replicated
from ledger.replies import Recorded
from ledger.reversals import taken_of
from ledger.scripts import Script
from ledger.settings import Settings

API_SOURCE = "api"
"""The source of an event found through Stripe's Events API (reconcile): recorded like a
delivery, counted as none."""


def new_request_id() -> str:
    """A per-HTTP-request id that makes a retried ledger write count once."""
    return os.urandom(12).hex()


class LedgerUnavailable(Exception):
    """Redis could not record a delivery, or no replica confirmed it (LEDGER_MIN_REPLICAS);
    the caller must answer 5xx so Stripe retries."""


@dataclass(frozen=True)
class Delivery:
    """What one accepted HTTP request (or, with source ``api``, Stripe's Events API) tells
    the ledger."""

    event: dict[str, Any]
    body: bytes
    classified: Classified
    secret_label: str
    source: str
    request_id: str
    purchase: dict[str, str] | None = None
    """The purchase fields it gives its payment, when not those of ``data.object`` alone
    (a retrieved Checkout Session with its PaymentIntent expanded: ledger/landing.py)."""


class Ledger:
    """Writes to the ledger; one instance per process, shared by its threads."""

    def __init__(self, redis: Redis, settings: Settings, clock_key: str = "") -> None:
        self.redis = redis
        self.settings = settings
        self.jobs = Jobs(redis, settings)
        self.record_script = Script(redis, "record_delivery", clock_key)
        self.reject_script = Script(redis, "record_rejection", clock_key)

    def record_delivery(self, delivery: Delivery) -> Recorded:
        """Record an accepted delivery; raises LedgerUnavailable if Redis cannot."""
        c = delivery.classified
        try:
            # Offered with every paid delivery; the script runs it for the payment's first.
            # A refund's too: the script runs it if a reversal or a settlement is due.
            due = c.paid or c.role == "refund"
            job = self.jobs.prepare(c.payment_key) if due and c.payment_key else NO_JOB
            named_keys, args = self.delivery_call(delivery, job.job_id)
            return replicated(self.record_script, named_keys, args, self.settings, job.commands)
        except RedisError as exc:  # RQ too asks the server (its version, once per process)
            raise LedgerUnavailable(str(exc)) from exc

    def delivery_call(
        self, delivery: Delivery, job_id: str
    ) -> tuple[dict[str, str], dict[str, object]]:
        """record_delivery.lua's named keys and arguments for one delivery."""
        event, c = delivery.event, delivery.classified
        obj = data_object(event)
        related_type, related_id = related(event)
        script_keys = {
            "event": keys.event(event["id"]),
            "request": keys.request(delivery.request_id),
        }
        return script_keys, {
            "type": event["type"],
            "created": _scalar(event.get("created")),
            "livemode": "1" if event.get("livemode") is True else "0",
            "api_version": _scalar(event.get("api_version")),
            "payment_key": c.payment_key or "",
            "role": c.role,
            "paid": "1" if c.paid else "0",
            "secret": delivery.secret_label,
            "source": delivery.source,
            "sha": hashlib.sha256(delivery.body).hexdigest(),
            "body": compress_payload(delivery.body),
            "event_ttl": self.settings.event_ttl_s,
            "grace_ms": self.settings.grace_ms,
            "amount": _scalar(paid_amount(obj)),
            "currency": _scalar(obj.get("currency")),
            "job_id": job_id,
            "linked": " ".join(c.linked),
            "hold": c.hold,
            "account": c.account,
            "fingerprint": c.fingerprint,
            "thin": "1" if is_thin(event) else "0",
            "related_type": related_type[:255],
            "related_id": related_id[:255],
            "purchase": encode_fields(
                purchase_fields(obj) if delivery.purchase is None else delivery.purchase
            ),
            "taken": taken_of(event["type"], obj, event.get("created"), _previous(event))
            if c.role == "refund"
            else "",
            "reverse_on": self.settings.reversal_mode,
        }

    def record_rejection(self, reason: str, record: dict[str, Any]) -> bool:
        """Count a rejection in memory only; False (and only the count lost) if Redis is down."""
        try:
            self.reject_script({}, {"reason": reason, "record": orjson.dumps(record)})
        except RedisError:
            return False
        return True


def _scalar(value: object) -> str:
    """A JSON scalar as the string Redis stores; anything else becomes ''."""
    if value is None or isinstance(value, dict | list):
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)[:255]


def _previous(event: dict[str, Any]) -> object:
    """The event's ``data.previous_attributes`` (what an update changed), if any."""
    data = event.get("data")
    return data.get("previous_attributes") if isinstance(data, dict) else None
