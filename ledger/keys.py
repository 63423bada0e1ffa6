"""Every Redis key the service uses is built here, and only here.

All keys share the ``wl:`` prefix. The Lua scripts receive their keys from these
functions (as KEYS or as a prefix argument), never by spelling them out. The schema
is documented in docs/ARCHITECTURE.md.
"""

PREFIX = "wl:"

STATS = PREFIX + "stats"
"""Hash of global counters: deliveries, events, duplicates, conflicts, rejected, ..."""

PAYMENT_STATES = PREFIX + "payments:by_state"
"""Hash: payment state -> number of payments in it."""

REJECTIONS = PREFIX + "rejections"
"""Capped list of recent rejections (JSON, newest first); bodies are never stored."""

EVENT_INDEX = PREFIX + "events:index"
"""Sorted set: event id scored by first delivery (ms); trimmed to the retention window."""

STATE_INDEX_PREFIX = PREFIX + "payments:state:"
"""Sorted sets ``wl:payments:state:{state}``: payment keys in that state, scored by when they
entered it (ms). Every state change moves the key (see ``move`` in workers/lua/common.lua)."""

DUE = PREFIX + "payments:due"
"""Sorted set: payments the sweeper must look at, scored by when (ms)."""

SWEEPER = PREFIX + "sweeper"
"""Hash: ``sweeps`` (passes completed by any sweeper) and ``last_ms`` (when the last ended)."""

FULFIL_HISTOGRAM = PREFIX + "fulfil:histogram"
"""Hash: fulfil latency counts per bucket (``le:{ms}``, ``le:inf``) and ``sum_ms``."""

LATENCIES = PREFIX + "fulfil:latency_ms"
"""Capped list of first-paid-delivery -> fulfilled latencies (ms), newest first."""

SECRETS_LAST_SEEN = PREFIX + "secrets:last_seen"
"""Hash: secret label -> time (ms) of the last delivery that secret verified."""

SERIES_PREFIX = PREFIX + "series:"
"""Per-hour hashes ``wl:series:{hour}`` of per-minute counts (``d:{minute}`` deliveries,
``r:{minute}`` rejections; epoch minutes), kept 48 hours. The scripts append the hour."""


def series(hour: int) -> str:
    """The per-minute counts of one hour (epoch hours)."""
    return f"{SERIES_PREFIX}{hour}"


def event(event_id: str) -> str:
    """Hash of one event: counts, times, metadata and the compressed payload."""
    return f"{PREFIX}evt:{event_id}"


def payment(payment_key: str) -> str:
    """Hash of one payment: state, fencing token, lease, events, receipt, timings, attempts."""
    return f"{PREFIX}pay:{payment_key}"


def request(request_id: str) -> str:
    """The stored answer to one HTTP request, so a retried write is applied once."""
    return f"{PREFIX}req:{request_id}"


def state_index(state: str) -> str:
    return f"{STATE_INDEX_PREFIX}{state}"


ALIAS_PREFIX = PREFIX + "alias:"
"""Strings ``wl:alias:{id}`` -> payment key: another id Stripe tied to that payment (a
Checkout session's invoice, an invoice's PaymentIntent), so its events join the payment."""

FINGERPRINT_PREFIX = PREFIX + "fp:"
"""Strings ``wl:fp:{pi|invoice}:{mode}:{customer}:{currency}:{amount}`` -> payment key, kept
DUPLICATE_WINDOW_SECONDS, to hold a possible duplicate purchase that no id ties (only with
FULFIL_UNLINKED_INVOICES)."""


def lua_constants() -> str:
    """Key names and prefixes for Lua scripts that derive keys themselves, prepended to each."""
    return (
        f"local PAYMENT_PREFIX = '{payment('')}'\n"
        f"local STATE_INDEX_PREFIX = '{STATE_INDEX_PREFIX}'\n"
        f"local ALIAS_PREFIX = '{ALIAS_PREFIX}'\n"
        f"local FP_PREFIX = '{FINGERPRINT_PREFIX}'\n"
        f"local SECRETS_LAST_SEEN = '{SECRETS_LAST_SEEN}'\n"
    )
