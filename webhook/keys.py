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

PAYMENT_INDEX = PREFIX + "payments:index"
"""Sorted set: payment key scored by first event (ms)."""

DUE = PREFIX + "payments:due"
"""Sorted set: payments the sweeper must look at, scored by when (ms)."""

LATENCIES = PREFIX + "fulfil:latency_ms"
"""Capped list of first-paid-delivery -> fulfilled latencies (ms), newest first."""


def event(event_id: str) -> str:
    """Hash of one event: counts, times, metadata and the compressed payload."""
    return f"{PREFIX}evt:{event_id}"


def payment(payment_key: str) -> str:
    """Hash of one payment: state, fencing token, lease, events, receipt, timings."""
    return f"{PREFIX}pay:{payment_key}"


def attempts(payment_key: str) -> str:
    """List of one payment's attempts (JSON), oldest first."""
    return f"{PREFIX}pay:{payment_key}:attempts"


def request(request_id: str) -> str:
    """The stored answer to one HTTP request, so a retried write is applied once."""
    return f"{PREFIX}req:{request_id}"


def payment_prefix() -> str:
    """Prefix handed to Lua scripts that derive payment keys themselves."""
    return f"{PREFIX}pay:"
