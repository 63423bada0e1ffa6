"""Reading what the Lua scripts store: Redis replies as text, whole numbers and epoch times
as Python values. Stored records may predate a field, or (in tests) hold anything: every
reader here answers None rather than raise."""

from datetime import UTC, datetime
from typing import Any

LATEST_MS = 253_402_300_799_999
"""The end of year 9999: later times are no times."""


def text(value: Any) -> str:
    """A Redis reply as str (clients here do not decode responses)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def decode_hash(raw: dict[Any, Any]) -> dict[str, str]:
    return {text(k): text(v) for k, v in raw.items()}


def whole(value: object) -> int | None:
    """A stored whole number (``'12'``, ``b'12'``, ``12``), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    digits = text(value) if value is not None else ""
    sign, rest = ("-", digits[1:]) if digits.startswith("-") else ("", digits)
    return int(sign + rest) if rest.isascii() and rest.isdigit() else None


def count(value: object) -> int:
    """A stored counter: 0 when absent."""
    return whole(value) or 0


def counts_of(stats: dict[str, str], group: str) -> dict[str, int]:
    """The counters ``{group}:{name}`` of a stats hash, by name, sorted."""
    prefix = group + ":"
    return {
        n.removeprefix(prefix): count(v) for n, v in sorted(stats.items()) if n.startswith(prefix)
    }


def ms_time(value: object) -> datetime | None:
    """Epoch milliseconds as an aware UTC datetime."""
    ms = whole(value)
    if ms is None or not 0 <= ms <= LATEST_MS:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC)


def s_time(value: object) -> datetime | None:
    """Epoch seconds (Stripe's ``created``) as an aware UTC datetime."""
    seconds = whole(value)
    return ms_time(seconds * 1000) if seconds is not None else None


def optional(value: object) -> str | None:
    """A stored value as text, None when absent or empty (a hash field, or a value inside a
    stored JSON record)."""
    return None if value is None or value == "" else text(value)
