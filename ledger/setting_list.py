"""Every setting of the service, declared once: a field of :class:`Settings` with its type
(the parsed value the code uses), its default, its kind with its bounds
(ledger/setting_kinds.py) and, under it, its docstring; then the values the code derives
from them. ledger/settings.py loads and checks them (the rules between settings too). To add
a setting: a field here, a case in tests/unit/test_settings.py, then regenerate
docs/CONFIGURATION.md's table (scripts/settings_table.py).
"""

import hashlib
import math
from dataclasses import dataclass
from functools import cached_property

from ledger import limits
from ledger import setting_kinds as kinds
from ledger import setting_secrets as secrets
from ledger import setting_urls as urls
from ledger.events import RULES, THIN_RULES, Policy
from ledger.redact import downstream, mask_secret, mask_url
from ledger.setting_fields import setting
from ledger.setting_kinds import Network
from ledger.setting_urls import ActionSpec

PAID = tuple(t for t, rule in RULES.items() if rule.role == "paid")
"""PAID_EVENT_TYPES by default: every snapshot event type the event table can count as paid."""
PAYABLE = frozenset([*PAID, *(t for t, thin in THIN_RULES.items() if thin.role == "paid")])
"""The event types PAID_EVENT_TYPES may list: those the event tables can count as paid."""
SECONDS = "seconds"


@dataclass(frozen=True)
class Settings:
    REDIS_URL: str = setting("redis://127.0.0.1:6389/0", urls.redis_url(), mask_url)
    """Where the ledger lives (the bundled config/redis.conf listens on 6389, so a system
    Redis on 6379 is never touched by accident)."""
    REDIS_SOCKET_TIMEOUT: float = setting(2.0, kinds.number(0, 300, SECONDS, above=True))
    """Seconds a ledger command may take before redis-py gives up on the reply."""
    REDIS_RETRIES: int = setting(3, kinds.whole(0, 100))
    """Retries of a ledger command after a timeout or a dropped connection (safe: every
    ledger write is idempotent per request id). With Redis frozen or gone a command gives
    up after REDIS_RETRIES + 1 tries of up to REDIS_SOCKET_TIMEOUT each (8 s at the
    defaults): a delivery's 503 comes well inside Stripe's wait."""
    REDIS_MAX_CONNECTIONS: int = setting(50, kinds.whole(1, 10_000))
    """Redis connections one process opens at most; a request finding none free waits for
    one (up to REDIS_SOCKET_TIMEOUT): a ledger write holds one for a millisecond or so."""
    REDIS_SENTINELS: tuple[tuple[str, int], ...] = setting(
        (), urls.host_ports(), urls.mask_host_ports
    )
    """Redis Sentinels; set, every process finds the primary of REDIS_SENTINEL_MASTER
    through them instead of REDIS_URL, and a new one after a failover (DEPLOYMENT.md)."""
    REDIS_SENTINEL_MASTER: str = setting("ledger", kinds.name())
    """The name the Sentinels monitor the ledger's primary under."""
    REDIS_SENTINEL_PASSWORD: str = setting("", secrets.token(), mask_secret)
    """Password of the Sentinels themselves (their ``requirepass``)."""
    REDIS_PASSWORD: str = setting("", secrets.token(), mask_secret)
    """Password of the primary and replicas found through Sentinel (with REDIS_URL, put it
    in the URL)."""
    REDIS_SENTINEL_TLS: bool = setting(False, kinds.boolean())
    """TLS to the Sentinels and to the primary and replicas they name, as ``rediss://`` is
    for REDIS_URL (certificates checked against the system's CAs, or OpenSSL's
    ``SSL_CERT_FILE``)."""
    REDIS_SENTINEL_DB: int = setting(0, kinds.whole(0, urls.REDIS_DATABASES - 1))
    """The database number of the primary found through Sentinel (with REDIS_URL, put it
    in the URL)."""
    LEDGER_MIN_REPLICAS: int = setting(0, kinds.whole(0, 100))
    """Replicas a ledger write must reach (Redis ``WAIT``) before a delivery is answered
    2xx or a fencing transition goes ahead; 0: single node, nothing waits."""
    LEDGER_WAIT_TIMEOUT: float = setting(1.0, kinds.milliseconds(300))
    """Seconds a write waits for LEDGER_MIN_REPLICAS; then the delivery is answered 503
    (Stripe retries) and a worker does not call. Under REDIS_SOCKET_TIMEOUT."""
    STRIPE_WEBHOOK_SECRET: tuple[str, ...] = setting((), secrets.webhook_secrets(), mask_secret)
    """The webhook signing secrets, checked in order (old and new during a rotation, or the
    Dashboard endpoint's and ``stripe listen``'s). The web app needs one."""
    STRIPE_WEBHOOK_SECRET_LABELS: tuple[str, ...] = setting((), secrets.labels())
    """A label per secret, in the same order (``dashboard,cli``): what deliveries are
    counted under; unlabelled: ``sha256:`` and 8 hex digits. ``cli`` marks source
    ``stripe-cli``."""
    STRIPE_WEBHOOK_TOLERANCE: int = setting(300, kinds.whole(0, None, SECONDS, " (0: no check)"))
    """Seconds a signature's timestamp may be away from now (Stripe's default)."""
    SECRET_RETIRE_AFTER_DAYS: int = setting(7, kinds.whole(1, None, "days"))
    """A secret that verified nothing this long while another did is safe to retire (longer
    than Stripe's three days of retries)."""
    MAX_BODY_BYTES: int = setting(512 * 1024, kinds.whole(1, 64 << 20, "bytes"))
    """Largest body accepted; a larger one is answered 413 and not read."""
    BODY_READ_TIMEOUT: float = setting(10.0, kinds.number(0, None, SECONDS, above=True))
    """Seconds a body may take to arrive after its headers; then 408 ``body_timeout`` and the
    connection closed (Stripe sends an event at once)."""
    ANSWER_WRITE_TIMEOUT: float = setting(10.0, kinds.number(0, 300, SECONDS, above=True))
    """Seconds an answer may take to be taken by its client; then its connection is reset
    (a client that sends requests and never reads their answers keeps no slot)."""
    CONNECTIONS_PER_ADDRESS: int = setting(250, kinds.whole(0, 100_000, "", " (0: no cap)"))
    """Connections one web process holds from one address; another is answered 429
    ``too_many_connections``. Half of GUNICORN_WORKER_CONNECTIONS; TRUSTED_PROXIES exempt."""
    CONNECTIONS_PER_ADDRESS_IPV6_PREFIX: int = setting(64, kinds.whole(32, 128, "bits"))
    """IPv6 clients count as one address for CONNECTIONS_PER_ADDRESS by this many leading
    bits (a /64 is one site's network); IPv4-mapped addresses count as IPv4."""
    REQUESTS_PER_CONNECTION: int = setting(100, kinds.whole(1, 1_000_000))
    """Requests one kept-alive connection carries; the last answer says ``Connection:
    close``. Any 4xx closes its connection at once."""
    CONNECTION_LIFETIME: float = setting(60.0, kinds.number(0, 86_400, SECONDS, above=True))
    """Seconds a connection is kept alive; the next answer says ``Connection: close``."""
    TRUSTED_PROXIES: tuple[Network, ...] = setting((), kinds.networks())
    """Proxies in front: a rejection of their request records the client their
    ``X-Forwarded-For`` names, and they are exempt from CONNECTIONS_PER_ADDRESS; anyone
    else's ``X-Forwarded-For`` is ignored."""
    EVENT_RETENTION_DAYS: int = setting(30, kinds.whole(1, None, "days"))
    """Event records and their payloads expire after this (Stripe keeps events 30 days)."""
    PAYMENT_RETENTION_DAYS: int = setting(0, kinds.whole(0, None, "days", " (0: keep)"))
    """Days after they settled that the sweeper deletes fulfilled, reversed,
    refunded-before-fulfilment and never-paid payments; more than EVENT_RETENTION_DAYS, so no
    resend can fulfil one again. Stripe can take a payment back long after (a dispute up to
    120 days after it, decided months later): a refund or dispute of a purged payment finds
    no paid record and reverses nothing (listed `pending`, its reason says so), so with
    `REVERSAL_ACTION` keep them 240 days or more."""
    OPS_TOKEN: tuple[str, ...] = setting((), secrets.tokens(), mask_secret)
    """Bearer tokens (or basic-auth passwords) of the dashboard, the ops API and /metrics,
    one per person or system; unset: those routes answer 401."""
    OPS_TOKEN_LABELS: tuple[str, ...] = setting((), secrets.token_labels())
    """A label per ops token, in the same order: who an action is recorded as (``ops:alice``);
    unset: ``default`` for one token, else ``token1``, ``token2``…"""
    METRICS_TOKEN: str = setting("", secrets.token(), mask_secret)
    """Bearer token of /metrics, when it should differ from OPS_TOKEN."""
    QUEUE_NAME: str = setting("fulfilment", kinds.name())
    """The RQ queue fulfilment jobs go to."""
    RQ_RESULT_TTL: int = setting(0, kinds.whole(0, None, SECONDS))
    """Seconds RQ keeps a finished job; 0: deleted at once, the outcome is in the ledger."""
    FULFILMENT_ACTION: ActionSpec = setting(
        urls.parse_action("sqlite:///var/downstream.sqlite3"),
        urls.fulfilment_action(),
        downstream,
    )
    """The downstream action (a relative SQLite path is from the process's directory;
    PostgreSQL: the user's own database, docs/ACTIONS.md "Fulfil into your own database")."""
    FULFILMENT_SQL: str = setting("", kinds.sql_statement())
    """The built-in SQLite or PostgreSQL downstream's effect as one SQL statement (or
    ``@path`` of a file holding it), run in the transaction that records the payment's key,
    with the purchase's fields as named parameters: ``%(payment_key)s``, ``%(amount)s``."""
    FULFILMENT_EFFECT: str = setting("", urls.python_target())
    """The same as a Python function, ``module:function``, called as ``effect(conn,
    purchase)`` inside that transaction; what it returns (JSON-able) is the receipt."""
    FULFILMENT_REPLAY_SAFE: bool = setting(False, kinds.boolean())
    """Whether an HTTP or callable action may be re-run after an attempt that may have
    applied it (interrupted, a read timeout, an HTTP 500); a function marked
    ``@replay_safe`` is, whatever this says (each worker logs which applies at its start)."""
    REVERSAL_ACTION: ActionSpec | None = setting(None, urls.fulfilment_action(), downstream)
    """What takes back a fulfilled payment's effect once it is refunded in full or a dispute
    is lost, called once per payment (per refund with REVERSAL_PER_REFUND) with the purchase
    and its reversal (the same kinds as FULFILMENT_ACTION; unset: no reversal,
    docs/REVERSAL.md)."""
    REVERSAL_REPLAY_SAFE: bool = setting(False, kinds.boolean())
    """Whether an HTTP or callable REVERSAL_ACTION may be re-run after an attempt that may
    have applied it (interrupted, a read timeout, an HTTP 500); a function marked
    ``@replay_safe`` is, whatever this says (logged at a worker's start)."""
    REVERSAL_SQL: str = setting("", kinds.sql_statement())
    """The built-in SQLite or PostgreSQL REVERSAL_ACTION's effect as one SQL statement (or
    ``@path``), run in the transaction that records the reversal's key, with the purchase's
    fields and the reversal's as ``%(reversal_amount)s``, ``%(reversal_refund_id)s``...
    (e.g. the order marked reversed in the user's own database)."""
    REVERSAL_EFFECT: str = setting("", urls.python_target())
    """The same as a Python function, ``module:function``, called as ``effect(conn,
    purchase)`` inside that transaction (``purchase["reversal"]`` the reversal); what it
    returns (JSON-able) is the reversal's receipt."""
    REVERSAL_PER_REFUND: bool = setting(False, kinds.boolean())
    """Each refund (by id) its own reversal call carrying its amount, a partial one too,
    instead of one call once the payment is refunded in full (docs/REVERSAL.md)."""
    REVERSAL_DISPUTE_WON: str = setting("hold", kinds.choice("hold", "fulfil"))
    """A dispute won after its reversal: ``hold`` the payment for a person, or ``fulfil`` it
    again automatically, once, under its own idempotency key (``refulfil:{payment_key}``)."""
    FULFILMENT_TIMEOUT: float = setting(10.0, kinds.number(0, None, SECONDS, above=True))
    """Seconds one downstream call may take in all: a hard deadline, not per socket read."""
    FULFILMENT_CONCURRENCY: int = setting(1, kinds.whole(1, 256))
    """Downstream calls one worker process keeps in flight, each job in a thread of its own
    under its own lease, token and deadline (1: one at a time, in the main thread)."""
    FULFILMENT_KILL_MARGIN_SECONDS: float = setting(0.5, kinds.number(0, 60, SECONDS, above=True))
    """Seconds past FULFILMENT_TIMEOUT at which a call that will not stop (inside C code)
    ends with its worker process; FULFILMENT_TIMEOUT + 2 x this is under LEASE_SECONDS."""
    LEASE_SECONDS: int = setting(30, kinds.whole(1, None, SECONDS))
    """How long an attempt holds a payment: FULFILMENT_TIMEOUT + 2 s or more."""
    MAX_ATTEMPTS: int = setting(5, kinds.whole(1, 1000))
    """Attempts before a payment is failed (a dead letter)."""
    RETRY_BASE_SECONDS: float = setting(1.0, kinds.milliseconds())
    """Backoff of the first retry; doubles per attempt."""
    RETRY_MAX_SECONDS: float = setting(300.0, kinds.milliseconds())
    """Cap on the backoff."""
    BREAKER_THRESHOLD: int = setting(5, kinds.whole(0, 1000, note=" (0: off)"))
    """Witnesses of a downstream outage, across every worker and with no answer between,
    that open that downstream's circuit breaker (``REVERSAL_ACTION`` on another downstream
    has its own, with these settings): each customer refused (its payments once, however often;
    a payment of no customer stands for itself) and each payment whose request never left (once
    however often); never one customer's refusals alone, so a customer's payments refused
    again and again (its quota) spend their own attempts (0: no breaker; a ``Retry-After``
    still defers the payment it answered)."""
    BREAKER_COOLDOWN_SECONDS: float = setting(30.0, kinds.milliseconds(3600))
    """Seconds the open breaker waits before a probe: a restarting downstream is not
    hammered, a backlog starts within half a minute of its return."""
    BREAKER_MAX_RETRY_AFTER_SECONDS: int = setting(600, kinds.whole(1, 86400, SECONDS))
    """Longest ``Retry-After`` honoured (longer ones are cut to it): it defers the payment it
    answered and, when the breaker opens, holds the breaker open that long."""
    FULFILMENT_MAX_RATE: int = setting(
        0, kinds.whole(0, 10000, "calls per second", " (0: no limit)")
    )
    """Downstream calls per second across every worker on every host, both actions' calls
    counted together (``REVERSAL_ACTION``'s too, on another downstream or not)."""
    QUEUED_GRACE_SECONDS: int = setting(30, kinds.whole(1, None, SECONDS))
    """A queued payment whose job is missing from RQ this long is re-enqueued."""
    SWEEP_INTERVAL: float = setting(2.0, kinds.number(0, None, SECONDS, above=True))
    """Seconds between sweeps of the sweeper process."""
    PAID_EVENT_TYPES: tuple[str, ...] = setting(PAID, kinds.event_types(PAYABLE))
    """Event types that mean "paid" (each with its condition, ledger/events.py); a thin
    ``v1.payment_intent.succeeded`` only when listed."""
    FULFIL_UNLINKED_INVOICES: bool = setting(False, kinds.boolean())
    """Whether an ``invoice.paid`` without a PaymentIntent that charged something fulfils,
    under the invoice id (one that charged nothing always does: CONFIGURATION.md, "One
    purchase, one payment")."""
    STRIPE_MODE: str = setting("live", kinds.choice("live", "test", "any"))
    """Which events may fulfil; the other mode's payments are held for a person."""
    FULFIL_CONNECT: bool = setting(False, kinds.boolean())
    """Whether events of connected accounts fulfil; otherwise they are held for a person."""
    STUCK_QUEUED_SECONDS: int = setting(300, kinds.whole(1, None, SECONDS))
    """A payment queued longer than this is listed under "needs a person"."""
    STRIPE_API_KEY: str = setting("", secrets.api_key(), mask_secret)
    """The key reconcile reads Stripe's events with, and workers and the landing page's
    trigger (``/ops/api/checkout-sessions/{id}/fulfil``) Checkout Sessions and their line
    items (CHECKOUT_LINE_ITEMS, CHECKOUT_WAIT_SECONDS), an invoice's lines (INVOICE_LINES), and
    the PaymentIntent of a payment only a thin event paid (its amount and purchase); a
    restricted key that can read events, Checkout Sessions, Invoices and PaymentIntents will
    do; ``scripts/run.sh --stripe-cli`` gives it and STRIPE_API_BASE to ``stripe listen``."""
    STRIPE_API_BASE: str = setting("https://api.stripe.com", urls.http_url(), mask_url)
    """Where reconcile, the workers and the landing page's trigger find Stripe's API (tests
    point it at a local server)."""
    RECONCILE_INTERVAL: float = setting(0.0, kinds.milliseconds(off="never"))
    """Seconds between the sweeper's reconcile runs over EVENT_RETENTION_DAYS."""
    CHECKOUT_LINE_ITEMS: bool = setting(False, kinds.boolean())
    """Whether a Checkout purchase's line items are fetched from Stripe's API (with
    STRIPE_API_KEY) once, before its first attempt, kept in the ledger and given to every
    attempt (``line_items`` of the purchase)."""
    INVOICE_LINES: bool = setting(False, kinds.boolean())
    """Whether an invoice's lines its event did not carry whole (``has_more``, or past the
    ledger's cap) are all read from Stripe's API (with STRIPE_API_KEY) once, before its
    first attempt, and given to every attempt (``invoice.lines``, ``lines_complete``)."""
    CHECKOUT_WAIT_SECONDS: float = setting(0.0, kinds.milliseconds(3600, off="none"))
    """The longest a payment paid before its Checkout Session's event came waits for it; then
    the session is looked up by its PaymentIntent through Stripe's API (with STRIPE_API_KEY),
    and the payment is fulfilled without a session if there is none. A deployment that sells
    through Checkout sets it; at 0 no payment waits."""
    STRIPE_API_MAX_RATE: int = setting(20, kinds.whole(1, 10_000, "per second"))
    """Requests per second to Stripe's API for purchases (line items, late sessions, an
    invoice's lines, a thin event's PaymentIntent, the landing page's sessions), shared by
    every worker and web process on every host (Stripe allows about 100 read requests a
    second live, 25 in test mode)."""

    @cached_property  # read on every delivery: made once
    def secret_labels(self) -> list[str]:
        """A label per secret (``STRIPE_WEBHOOK_SECRET_LABELS``), else its fingerprint."""
        given = self.STRIPE_WEBHOOK_SECRET_LABELS
        secrets = self.STRIPE_WEBHOOK_SECRET
        return [given[i] if i < len(given) else fingerprint(s) for i, s in enumerate(secrets)]

    @cached_property
    def ops_token_labels(self) -> list[str]:
        """A label per ops token (``OPS_TOKEN_LABELS``), else ``default`` or ``tokenN``."""
        if self.OPS_TOKEN_LABELS:
            return [*self.OPS_TOKEN_LABELS]
        count = len(self.OPS_TOKEN)
        return ["default"] if count == 1 else [f"token{i}" for i in range(1, count + 1)]

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
    def call_window(self) -> float:
        """Seconds after its fence was sent that a call may still start: it then ends (or
        its process does, FULFILMENT_KILL_MARGIN_SECONDS after the deadline) at least that
        margin before the lease can expire."""
        return (
            self.LEASE_SECONDS - self.FULFILMENT_TIMEOUT - 2 * self.FULFILMENT_KILL_MARGIN_SECONDS
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
    def attempt_s(self) -> float:
        """Seconds a job needs from its admission at the gate to its end: longer than any
        lease, so the ledger's lease, not RQ, decides when an attempt is given up (a stale
        one is fenced when it comes back)."""
        return self.LEASE_SECONDS + self.FULFILMENT_TIMEOUT + limits.JOB_TIMEOUT_MARGIN_SECONDS

    @property
    def job_timeout_s(self) -> int:
        """RQ's timeout of a fulfilment job: its wait for a rate slot at the gate (at most
        RATE_WAIT_SECONDS, workers/gating.py) and then its attempt."""
        return math.ceil(limits.RATE_WAIT_SECONDS + self.attempt_s)

    @property
    def reversal_on(self) -> bool:
        """Whether a refund in full or a lost dispute has a fulfilled payment reversed."""
        return self.REVERSAL_ACTION is not None

    @property
    def reversal_mode(self) -> str:
        """The ledger scripts' ``reverse_on``: ``0``, or ``1`` with ``each``
        (REVERSAL_PER_REFUND) and ``refulfil`` (REVERSAL_DISPUTE_WON=fulfil)."""
        if not self.reversal_on:
            return "0"
        words = ["1"] + ["each"] * self.REVERSAL_PER_REFUND
        return " ".join(words + ["refulfil"] * (self.REVERSAL_DISPUTE_WON == "fulfil"))

    @property
    def sqlite_downstream(self) -> str | None:
        """The file of the built-in SQLite downstream, when it is the action."""
        action = self.FULFILMENT_ACTION
        return action.target if action.scheme == "sqlite" else None


def fingerprint(secret: str) -> str:
    """A short name that identifies ``secret`` without revealing it."""
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()[:8]
