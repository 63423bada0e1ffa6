"""The delivery ledger: Lua scripts that record deliveries and rejections in Redis.

Each accepted delivery is one EVALSHA of ``lua/record_delivery.lua``: the event
record, the global counters, the payment record and (for the first paid event of a
payment) the RQ job are written together or not at all.
"""

import hashlib
import os
from dataclasses import dataclass
from importlib import resources
from typing import Any

import orjson
from redis import Redis
from redis.exceptions import RedisError

from ledger import defaults, keys
from ledger.enqueue import NO_JOB, Jobs
from ledger.events import Classified
from ledger.payloads import compress_payload
from ledger.settings import Settings


def load_script(package: str, name: str, *shared: str) -> str:
    """A script as Redis runs it: the key prefixes, the shared prelude, ``shared`` files of
    the same package, then the script itself."""
    lua = resources.files(package).joinpath("lua")
    prelude = resources.files("ledger").joinpath("lua", "prelude.lua").read_text()
    parts = [keys.lua_constants(), prelude, *(lua.joinpath(f).read_text() for f in shared)]
    return "\n".join([*parts, lua.joinpath(name).read_text()])


def new_request_id() -> str:
    """A per-HTTP-request id that makes a retried ledger write count once."""
    return os.urandom(12).hex()


class LedgerUnavailable(Exception):
    """Redis could not record a delivery; the caller must answer 5xx so Stripe retries."""


@dataclass(frozen=True)
class Delivery:
    """What one accepted HTTP request tells the ledger."""

    event: dict[str, Any]
    body: bytes
    classified: Classified
    secret_label: str
    source: str
    request_id: str


@dataclass(frozen=True)
class Recorded:
    deliveries: int
    duplicate: bool
    conflict: bool
    enqueued: bool
    payment_state: str
    payment_key: str
    """The payment the event joined: its own key, or the one an id Stripe ties it to."""


class Ledger:
    """Writes to the ledger; one instance per process, shared by its threads."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.jobs = Jobs(redis, settings)
        self._record = redis.register_script(load_script("ledger", "record_delivery.lua"))
        self._reject = redis.register_script(load_script("ledger", "record_rejection.lua"))

    def record_delivery(self, delivery: Delivery) -> Recorded:
        """Record an accepted delivery; raises LedgerUnavailable if Redis cannot."""
        event, c, s = delivery.event, delivery.classified, self.settings
        obj = event["data"]["object"]
        pk = c.payment_key or ""
        try:
            # Offered with every paid delivery; the script runs it for the payment's first.
            job = self.jobs.enqueue(pk) if c.paid and pk else NO_JOB
        except RedisError as exc:  # RQ asks the server's version once per process
            raise LedgerUnavailable(str(exc)) from exc
        script_keys = [
            keys.event(event["id"]),
            keys.STATS,
            keys.request(delivery.request_id),
            keys.EVENT_INDEX,
            keys.PAYMENT_STATES,
            keys.DUE,
        ]
        args = [
            event["id"],
            event["type"],
            _scalar(event.get("created")),
            "1" if event.get("livemode") is True else "0",
            _scalar(event.get("api_version")),
            pk,
            c.role,
            "1" if c.paid else "0",
            delivery.secret_label,
            delivery.source,
            hashlib.sha256(delivery.body).hexdigest(),
            compress_payload(delivery.body),
            s.event_ttl_s,
            defaults.REQUEST_ID_TTL,
            s.grace_ms,
            _scalar(_amount(obj)),
            _scalar(obj.get("currency")),
            job.job_id,
            keys.SERIES_PREFIX,
            " ".join(c.linked),
            c.hold,
            c.account,
            c.fingerprint,
            defaults.DUPLICATE_WINDOW_SECONDS,
            *job.commands,
        ]
        try:
            n, dup, conflict, enqueued, state, key = self._record(keys=script_keys, args=args)
        except RedisError as exc:
            raise LedgerUnavailable(str(exc)) from exc
        return Recorded(int(n), bool(dup), bool(conflict), bool(enqueued), _text(state), _text(key))

    def record_rejection(self, reason: str, record: dict[str, Any], request_id: str) -> bool:
        """Count a rejection; returns False (and loses only the count) if Redis is down."""
        try:
            self._reject(
                keys=[keys.STATS, keys.REJECTIONS, keys.request(request_id)],
                args=[
                    reason,
                    orjson.dumps(record),
                    defaults.RECENT_REJECTIONS,
                    defaults.REQUEST_ID_TTL,
                    keys.SERIES_PREFIX,
                ],
            )
        except RedisError:
            return False
        return True


def _amount(obj: dict[str, Any]) -> object:
    for name in ("amount_received", "amount_captured", "amount_total", "amount_paid", "amount"):
        value = obj.get(name)
        if isinstance(value, int) and value:
            return value
    return obj.get("amount")


def _scalar(value: object) -> str:
    """A JSON scalar as the string Redis stores; anything else becomes ''."""
    if value is None or isinstance(value, dict | list):
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)[:255]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")
