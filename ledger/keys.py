"""Every Redis key the service uses is built here, and only here, with its TTL or cap.

All keys share the ``wl:`` prefix, but RQ's own (``rq:``), whose names RQ fixes. The Lua
scripts get every name, prefix, TTL and cap below as constants (:func:`lua_constants`,
prepended to each script) and their per-call keys as KEYS; they never spell one out. The
schema is documented in docs/LEDGER.md.
"""

from dataclasses import dataclass

from ledger import limits

PREFIX = "wl:"

STATS = PREFIX + "stats"
"""Hash of global counters: deliveries, events, duplicates, conflicts, rejected, ..."""

PAYMENT_STATE_COUNTS = PREFIX + "payments:by_state"
"""Hash: payment state -> number of payments in it."""

REJECTIONS = PREFIX + "rejections"
"""Capped list of recent rejections (JSON, newest first); bodies are never stored."""

REJECTIONS_CAP = limits.RECENT_REJECTIONS

REJECTIONS_KEPT = PREFIX + "rejections:kept"
"""Hash: how many rejections the sweeper has put on disk (lua/keep_rejections.lua), and when."""

EVENT_INDEX = PREFIX + "events:index"
"""Sorted set: event id scored by first delivery (ms); trimmed to the retention window."""

STATE_INDEX_PREFIX = PREFIX + "payments:state:"
"""Sorted sets ``wl:payments:state:{state}``: payment keys in that state, scored by when they
entered it (ms; ``retrying``: when its retries began, its ``retrying_since``). Every state
change moves the key (``move`` in lua/prelude.lua)."""

DUE = PREFIX + "payments:due"
"""Sorted set: payments the sweeper must look at, scored by when (ms)."""

SWEEPER = PREFIX + "sweeper"
"""Hash: ``sweeps`` (passes completed by any sweeper), ``last_ms`` (when the last ended),
``reconcile_ms``, and ``clock_steps``, ``clock_step_at``, ``clock_step_ms`` (forward steps of
Redis's clock a looping sweeper saw: workers/sweeper.py)."""

FULFIL_HISTOGRAM = PREFIX + "fulfil:histogram"
"""Hash: fulfil latency counts per bucket (``le:{ms}``, ``le:inf``) and ``sum_ms``."""

SECRETS_LAST_SEEN = PREFIX + "secrets:last_seen"
"""Hash: secret label -> time (ms) of the last delivery that secret verified."""

SERIES_PREFIX = PREFIX + "series:"
"""Per-hour hashes ``wl:series:{hour}`` of per-minute counts (``d:{minute}`` deliveries,
``r:{minute}`` rejections; epoch minutes). The scripts append the hour."""

SERIES_TTL = 48 * 3600

EVENT_PREFIX = PREFIX + "evt:"
"""Hashes ``wl:evt:{event_id}``: counts, times, metadata and the compressed payload; they
expire EVENT_RETENTION_DAYS after the first delivery."""

PAYMENT_PREFIX = PREFIX + "pay:"
"""Hashes ``wl:pay:{payment_key}``: state, fencing token, lease, events, receipt, timings,
attempts."""

REQUEST_PREFIX = PREFIX + "req:"
"""Strings ``wl:req:{request_id}``: the answer to one HTTP request's ledger write, so a
retried write is applied once."""

MAX_TTL_SECONDS = limits.MAX_DURATION_DAYS * 86400
"""Longest TTL (seconds) a script takes as an argument, and ``MAX_TTL_MS`` the longest
duration in milliseconds: the longest a setting may hold (ledger/setting_kinds.py), so a
script refuses anything longer before its first write. Far inside what Redis's EXPIRE
accepts, and exact as a Lua number once added to now."""

MAX_TTL_MS = MAX_TTL_SECONDS * 1000

REQUEST_TTL = limits.REQUEST_ID_TTL

ALIAS_PREFIX = PREFIX + "alias:"
"""Strings ``wl:alias:{id}`` -> payment key: another id Stripe tied to that payment (a
Checkout session's invoice or own id, an invoice's PaymentIntent), so its events join the
payment and the landing page finds it by the session (ledger/landing.py). The
payment lists them (its ``aliases`` field), so purge deletes them with it."""

FINGERPRINT_PREFIX = PREFIX + "fp:"
"""Strings ``wl:fp:{pi|invoice}:{mode}:{customer}:{currency}:{amount}`` -> payment key, to
hold a possible duplicate purchase that no id ties (only with FULFIL_UNLINKED_INVOICES)."""

FINGERPRINT_TTL = limits.DUPLICATE_WINDOW_SECONDS

UNTIED_PREFIX = PREFIX + "untied:"
"""Sorted sets ``wl:untied:{pi|invoice}:{mode}:{any|guest}:{currency}:{amount}`` of payment
keys (scored by time) that no id from Stripe has tied to the rest of their purchase yet:
``any`` holds every such payment, ``guest`` those without a customer. A guest's payment
is compared with ``any`` of the other kind, a customer's with ``guest`` (besides its
fingerprint); a tie removes both records, and each write and read drops members older than
FINGERPRINT_TTL (only with FULFIL_UNLINKED_INVOICES)."""

CALLER_PREFIX = PREFIX + "caller:"
"""Strings ``wl:caller:{host}:{pid}:{nonce}`` -> ``{payment_key} {token} {until_ms}``: the
worker process in that downstream call, written with the fence (expiring with the lease)
and deleted when the attempt finishes. The watchdog ends a process whose call outlives its
deadline before the key can expire, so while it exists the call may still be running and
a person's retry is refused (operator.lua)."""

BREAKER = PREFIX + "fulfilment:breaker"
"""Hash: the circuit breaker of FULFILMENT_ACTION's downstream, every worker's: ``state``
(closed|open), ``failures`` (the witnesses counted since the last answer:
``BREAKER_WITNESSES``), ``opened_at``, ``open_until``, ``probe_until`` and ``probe_payment``
(the one probe call of a cool-down), ``probe_failed_at`` and ``probe_failed_by`` (the
prober's customer: gate.lua lets another customer's payment probe first), ``last_error``,
counters ``opens``, ``probes``, ``closes``, ``answers`` (up answers heard). Also
REVERSAL_ACTION's when it calls the same downstream."""

BREAKER_WITNESSES = PREFIX + "fulfilment:breaker:witnesses"
"""Sorted set: the evidence of a downstream outage since its last up answer (ms of each
one's latest failure): each customer refused (``cus:{id}``; a payment of none by its key)
and each payment whose request never left (``unsent:{payment_key}``), once however often;
deleted by any up answer (lua/breaker.lua)."""

REVERSAL_BREAKER_HASH = PREFIX + "reversal:breaker"
"""Hash as ``BREAKER``: the circuit breaker of REVERSAL_ACTION's downstream when it is
another than FULFILMENT_ACTION's (ledger.downstream.reversal_apart); its witnesses are
``REVERSAL_BREAKER_WITNESSES``."""

REVERSAL_BREAKER_WITNESSES = PREFIX + "reversal:breaker:witnesses"

BREAKER_WITNESSES_KEPT = 1000
"""The most recent witnesses kept: as many as the largest BREAKER_THRESHOLD needs."""


@dataclass(frozen=True)
class Breaker:
    """One downstream's circuit breaker: the calls of ``action`` (fulfilment|reversal) it
    gates, its hash, its witnesses, and the ``waiting`` reason of a payment held by it."""

    action: str
    state: str
    witnesses: str
    wait: str


FULFILMENT_BREAKER = Breaker("fulfilment", BREAKER, BREAKER_WITNESSES, "breaker")
REVERSAL_BREAKER = Breaker(
    "reversal", REVERSAL_BREAKER_HASH, REVERSAL_BREAKER_WITNESSES, "reversal_breaker"
)
BREAKERS = (FULFILMENT_BREAKER, REVERSAL_BREAKER)

PAUSE = PREFIX + "fulfilment:pause"
"""Hash, present while fulfilment is paused: ``since`` (ms), ``by`` (ops token label),
``reason``, ``request`` (the pause call's id). ``wl:fulfilment:resumed`` keeps the last
resume (``at``, ``by``, ``request``, ``ended``: 1 if it ended a pause)."""

RESUMED = PREFIX + "fulfilment:resumed"

CALL_LOG = PREFIX + "fulfilment:calls"
"""Sorted set: downstream calls admitted in the last second (ms scores), for
FULFILMENT_MAX_RATE; its members are ``{ms}:{seq}`` with ``seq`` from ``CALL_SEQ``."""

CALL_SEQ = PREFIX + "fulfilment:call_seq"

WAITING_PREFIX = PREFIX + "fulfilment:waiting:"
"""Sorted sets ``wl:fulfilment:waiting:{reason}`` (paused|breaker|reversal_breaker|rate):
payments deferred without a call, scored by when they began to wait; each is ``retrying`` in
the ledger, with ``waiting`` = reason in its hash (``reversal_breaker``: held by
``REVERSAL_BREAKER_HASH``)."""

WAIT_REASONS = ("paused", "breaker", "reversal_breaker", "rate")
JOB_TIMEOUT = "job_timeout"
"""A deferral's reason (``deferred:job_timeout`` in STATS) that is no wait: a job whose RQ
timeout left no room for an attempt leaves its payment due at once (gate.lua)."""

STRIPE_API_CALLS = PREFIX + "stripe_api:calls"
"""Sorted set: requests to Stripe's API for purchases (line items, late sessions) in the
last second (ms scores), for STRIPE_API_MAX_RATE; members ``{ms}:{seq}`` with ``seq`` from
``STRIPE_API_SEQ``."""

STRIPE_API_SEQ = PREFIX + "stripe_api:seq"

STRIPE_WAIT = "stripe_api"
"""The ``waiting`` reason of a payment whose purchase waits for Stripe's API (its line
items): ``retrying`` with ``next_at``, due for the sweeper, no attempt spent."""

CHECKOUT_WAIT = "checkout_session"
"""The ``waiting`` reason of a payment paid before its Checkout Session's event came
(CHECKOUT_WAIT_SECONDS): as STRIPE_WAIT."""


def waiting(reason: str) -> str:
    return WAITING_PREFIX + reason


RQ_QUEUE_PREFIX = "rq:queue:"
"""RQ's queue lists (``Queue.redis_queue_namespace_prefix``; a test pins it)."""

RQ_JOB_PREFIX = "rq:job:"
"""RQ's job hashes (``Job.redis_job_namespace_prefix``; a test pins it)."""


def event(event_id: str) -> str:
    return EVENT_PREFIX + event_id


def payment(payment_key: str) -> str:
    return PAYMENT_PREFIX + payment_key


def alias(some_id: str) -> str:
    return ALIAS_PREFIX + some_id


def request(request_id: str) -> str:
    return REQUEST_PREFIX + request_id


def state_index(state: str) -> str:
    return STATE_INDEX_PREFIX + state


RECONCILE_RUNS = PREFIX + "reconcile:runs"
"""Capped list of reconcile runs (JSON, newest first): when, window, what Stripe listed, what
the ledger lacked (by type and payment) and what was recorded."""

RECONCILE_SLOT = PREFIX + "reconcile:slot"
"""String that lives RECONCILE_INTERVAL: set by the sweeper that runs reconcile in it."""


def series(hour: int) -> str:
    """The per-minute counts of one hour (epoch hours)."""
    return f"{SERIES_PREFIX}{hour}"


def caller(caller_id: str) -> str:
    """The liveness key of one worker process while it is in a downstream call."""
    return CALLER_PREFIX + caller_id


def rq_queue(name: str) -> str:
    return RQ_QUEUE_PREFIX + name


LUA_CONSTANTS: dict[str, str | int | tuple[int, ...]] = {
    "STATS": STATS,
    "PAYMENT_STATES": PAYMENT_STATE_COUNTS,
    "REJECTIONS": REJECTIONS,
    "REJECTIONS_CAP": REJECTIONS_CAP,
    "REJECTIONS_KEPT": REJECTIONS_KEPT,
    "EVENT_INDEX": EVENT_INDEX,
    "STATE_INDEX_PREFIX": STATE_INDEX_PREFIX,
    "DUE": DUE,
    "FULFIL_HISTOGRAM": FULFIL_HISTOGRAM,
    "LATENCY_BUCKETS_MS": limits.FULFIL_BUCKETS_MS,
    "SECRETS_LAST_SEEN": SECRETS_LAST_SEEN,
    "SERIES_PREFIX": SERIES_PREFIX,
    "SERIES_TTL": SERIES_TTL,
    "EVENT_PREFIX": EVENT_PREFIX,
    "PAYMENT_PREFIX": PAYMENT_PREFIX,
    "REQUEST_TTL": REQUEST_TTL,
    "MAX_TTL_SECONDS": MAX_TTL_SECONDS,
    "MAX_TTL_MS": MAX_TTL_MS,
    "ALIAS_PREFIX": ALIAS_PREFIX,
    "FP_PREFIX": FINGERPRINT_PREFIX,
    "FP_TTL": FINGERPRINT_TTL,
    "UNTIED_PREFIX": UNTIED_PREFIX,
    "CALLER_PREFIX": CALLER_PREFIX,
    "RQ_JOB_PREFIX": RQ_JOB_PREFIX,
    "QUEUE_SCAN_CAP": limits.QUEUE_SCAN_CAP,
    "NOTES_KEPT": limits.NOTES_KEPT,
    "BREAKER_WITNESSES_KEPT": BREAKER_WITNESSES_KEPT,
    "PAUSE": PAUSE,
    "RESUMED": RESUMED,
    "CALL_LOG": CALL_LOG,
    "CALL_SEQ": CALL_SEQ,
    "WAITING_PREFIX": WAITING_PREFIX,
    "STRIPE_API_CALLS": STRIPE_API_CALLS,
    "STRIPE_API_SEQ": STRIPE_API_SEQ,
    "STRIPE_WAIT": STRIPE_WAIT,
    "CHECKOUT_WAIT": CHECKOUT_WAIT,
}
"""What every script knows by name (see lua/prelude.lua)."""


def lua_constants(clock_key: str = "") -> str:
    """``LUA_CONSTANTS`` as Lua locals, prepended to every script. ``clock_key`` names a key
    whose value (ms) the scripts take as "now" instead of Redis ``TIME``: tests that explore
    the protocol move time by hand. Production passes none, so no script reads such a key."""
    names = {"CLOCK_KEY": clock_key, **LUA_CONSTANTS}
    return "".join(f"local {name} = {_lua(value)}\n" for name, value in names.items())


def _lua(value: str | int | tuple[int, ...]) -> str:
    if isinstance(value, tuple):
        return "{" + ", ".join(map(str, value)) + "}"
    return repr(value) if isinstance(value, str) else str(value)
