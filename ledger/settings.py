"""Settings read from the environment, shared by the web app, the worker and the CLI."""

import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property

from ledger import defaults
from ledger.events import Policy


@dataclass(frozen=True)
class Settings:
    REDIS_URL: str = defaults.REDIS_URL
    REDIS_SOCKET_TIMEOUT: float = defaults.REDIS_SOCKET_TIMEOUT
    REDIS_RETRIES: int = defaults.REDIS_RETRIES
    REDIS_MAX_CONNECTIONS: int = defaults.REDIS_MAX_CONNECTIONS
    REDIS_SENTINELS: str = defaults.REDIS_SENTINELS
    REDIS_SENTINEL_MASTER: str = defaults.REDIS_SENTINEL_MASTER
    REDIS_SENTINEL_PASSWORD: str = defaults.REDIS_SENTINEL_PASSWORD
    REDIS_PASSWORD: str = defaults.REDIS_PASSWORD
    LEDGER_MIN_REPLICAS: int = defaults.LEDGER_MIN_REPLICAS
    LEDGER_WAIT_TIMEOUT: float = defaults.LEDGER_WAIT_TIMEOUT
    STRIPE_WEBHOOK_SECRET: str = defaults.STRIPE_WEBHOOK_SECRET
    STRIPE_WEBHOOK_SECRET_LABELS: str = defaults.STRIPE_WEBHOOK_SECRET_LABELS
    STRIPE_WEBHOOK_TOLERANCE: int = defaults.STRIPE_WEBHOOK_TOLERANCE
    SECRET_RETIRE_AFTER_DAYS: int = defaults.SECRET_RETIRE_AFTER_DAYS
    MAX_BODY_BYTES: int = defaults.MAX_BODY_BYTES
    BODY_READ_TIMEOUT: float = defaults.BODY_READ_TIMEOUT
    EVENT_RETENTION_DAYS: int = defaults.EVENT_RETENTION_DAYS
    PAYMENT_RETENTION_DAYS: int = defaults.PAYMENT_RETENTION_DAYS
    OPS_TOKEN: str = defaults.OPS_TOKEN
    METRICS_TOKEN: str = defaults.METRICS_TOKEN
    QUEUE_NAME: str = defaults.QUEUE_NAME
    RQ_RESULT_TTL: int = defaults.RQ_RESULT_TTL
    FULFILMENT_ACTION: str = defaults.FULFILMENT_ACTION
    FULFILMENT_REPLAY_SAFE: bool = defaults.FULFILMENT_REPLAY_SAFE
    FULFILMENT_TIMEOUT: float = defaults.FULFILMENT_TIMEOUT
    LEASE_SECONDS: int = defaults.LEASE_SECONDS
    MAX_ATTEMPTS: int = defaults.MAX_ATTEMPTS
    RETRY_BASE_SECONDS: float = defaults.RETRY_BASE_SECONDS
    RETRY_MAX_SECONDS: float = defaults.RETRY_MAX_SECONDS
    QUEUED_GRACE_SECONDS: int = defaults.QUEUED_GRACE_SECONDS
    SWEEP_INTERVAL: float = defaults.SWEEP_INTERVAL
    PAID_EVENT_TYPES: tuple[str, ...] = field(default=defaults.PAID_EVENT_TYPES)
    FULFIL_UNLINKED_INVOICES: bool = defaults.FULFIL_UNLINKED_INVOICES
    STRIPE_MODE: str = defaults.STRIPE_MODE
    FULFIL_CONNECT: bool = defaults.FULFIL_CONNECT
    STUCK_QUEUED_SECONDS: int = defaults.STUCK_QUEUED_SECONDS
    STRIPE_API_KEY: str = defaults.STRIPE_API_KEY
    STRIPE_API_BASE: str = defaults.STRIPE_API_BASE
    RECONCILE_INTERVAL: float = defaults.RECONCILE_INTERVAL

    @cached_property  # read on every request: split once
    def secrets(self) -> list[str]:
        """The webhook secrets in the order given (tried in that order)."""
        return [s.strip() for s in self.STRIPE_WEBHOOK_SECRET.split(",") if s.strip()]

    @cached_property
    def secret_labels(self) -> list[str]:
        """A label per secret (``STRIPE_WEBHOOK_SECRET_LABELS``), else its fingerprint."""
        given = [s.strip() for s in self.STRIPE_WEBHOOK_SECRET_LABELS.split(",") if s.strip()]
        return [given[i] if i < len(given) else fingerprint(s) for i, s in enumerate(self.secrets)]

    @cached_property
    def sentinels(self) -> list[tuple[str, int]]:
        """``REDIS_SENTINELS`` as (host, port) pairs; empty: connect to REDIS_URL."""
        pairs = [s.strip().rsplit(":", 1) for s in self.REDIS_SENTINELS.split(",") if s.strip()]
        if any(len(p) != 2 or not p[0] or not p[1].isdigit() for p in pairs):
            raise ValueError(f"REDIS_SENTINELS={self.REDIS_SENTINELS!r}: expected host:port,...")
        return [(host, int(port)) for host, port in pairs]

    @cached_property
    def policy(self) -> Policy:
        """What this deployment fulfils (the event table's inputs)."""
        return Policy(
            frozenset(self.PAID_EVENT_TYPES),
            self.FULFIL_UNLINKED_INVOICES,
            self.STRIPE_MODE,
            self.FULFIL_CONNECT,
        )

    @property
    def lease_ms(self) -> int:
        return int(self.LEASE_SECONDS * 1000)

    @property
    def grace_ms(self) -> int:
        return int(self.QUEUED_GRACE_SECONDS * 1000)

    @property
    def retry_base_ms(self) -> int:
        return int(self.RETRY_BASE_SECONDS * 1000)

    @property
    def retry_cap_ms(self) -> int:
        return int(self.RETRY_MAX_SECONDS * 1000)

    @property
    def event_ttl_s(self) -> int:
        return self.EVENT_RETENTION_DAYS * 86400

    @property
    def job_timeout_s(self) -> int:
        """RQ's timeout of a fulfilment job: longer than any lease, so the ledger's lease, not
        RQ, decides when an attempt is given up (a stale one is fenced when it comes back)."""
        margin = defaults.JOB_TIMEOUT_MARGIN_SECONDS
        return math.ceil(self.LEASE_SECONDS + self.FULFILMENT_TIMEOUT + margin)

    @property
    def sqlite_downstream(self) -> str | None:
        """The file of the built-in SQLite downstream, when it is the action."""
        action = self.FULFILMENT_ACTION
        return action.removeprefix("sqlite:///") if action.startswith("sqlite:///") else None


def fingerprint(secret: str) -> str:
    """A short name that identifies ``secret`` without revealing it."""
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()[:8]


def _convert(raw: str, kind: object) -> object:
    if kind is bool or kind == "bool":
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if kind is int or kind == "int":
        return int(raw)
    if kind is float or kind == "float":
        return float(raw)
    if str(kind).startswith("tuple"):
        return tuple(s.strip() for s in raw.split(",") if s.strip())
    return raw


def load(environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Build settings from defaults, then the environment, then explicit overrides."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for f in fields(Settings):
        if f.name in env:
            values[f.name] = _convert(env[f.name], f.type)
    values.update(overrides)
    return validated(Settings(**values))  # type: ignore[arg-type]


def validated(settings: Settings) -> Settings:
    """Refuse settings that would break a guarantee."""
    days = settings.PAYMENT_RETENTION_DAYS
    if 0 < days <= settings.EVENT_RETENTION_DAYS:
        raise ValueError(
            f"PAYMENT_RETENTION_DAYS={days} must be 0 (keep) or more than EVENT_RETENTION_DAYS="
            f"{settings.EVENT_RETENTION_DAYS}: a late resend must never fulfil a payment twice"
        )
    if settings.STRIPE_MODE not in ("live", "test", "any"):
        raise ValueError(f"STRIPE_MODE={settings.STRIPE_MODE!r} must be live, test or any")
    margin = defaults.LEASE_MARGIN_SECONDS
    if settings.LEASE_SECONDS < settings.FULFILMENT_TIMEOUT + margin:
        raise ValueError(
            f"LEASE_SECONDS={settings.LEASE_SECONDS} must be at least FULFILMENT_TIMEOUT="
            f"{settings.FULFILMENT_TIMEOUT} + {margin}: a call must end before its lease does"
        )
    if settings.RECONCILE_INTERVAL > 0 and not settings.STRIPE_API_KEY:
        raise ValueError("RECONCILE_INTERVAL is set, STRIPE_API_KEY is not: reconcile reads events")
    _check_replication(settings)
    labels = settings.secret_labels
    if len(set(labels)) < len(labels):
        raise ValueError(f"STRIPE_WEBHOOK_SECRET_LABELS: two secrets share a label in {labels}")
    if any(label.isdigit() for label in labels):
        raise ValueError(
            "STRIPE_WEBHOOK_SECRET_LABELS: a label must not be a plain number (the ledger "
            "recorded secrets by position before labels, and shows those as numbers)"
        )
    return settings


def _check_replication(settings: Settings) -> None:
    """Sentinel addresses parse, and a replica wait ends before its socket timeout."""
    if settings.sentinels and not settings.REDIS_SENTINEL_MASTER:
        raise ValueError("REDIS_SENTINELS is set: REDIS_SENTINEL_MASTER must name the primary")
    if settings.LEDGER_MIN_REPLICAS < 0:
        raise ValueError(f"LEDGER_MIN_REPLICAS={settings.LEDGER_MIN_REPLICAS} must be 0 or more")
    wait, socket = settings.LEDGER_WAIT_TIMEOUT, settings.REDIS_SOCKET_TIMEOUT
    if settings.LEDGER_MIN_REPLICAS and not 0 < wait < socket:
        raise ValueError(
            f"LEDGER_WAIT_TIMEOUT={wait} must be above 0 and under REDIS_SOCKET_TIMEOUT={socket}"
            ": a client that gives up on the WAIT first would retry the write"
        )
