"""What every object of the read model shares: its base class, the error answer, and the
two encodings (JSON as the API and ``--json`` print it; plain builtins for bundles)."""

from datetime import datetime
from typing import Any

import msgspec


class View(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Every field is always present (null when there is nothing); no other field is."""


class Problem(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """An error answer: ``error`` for programs, ``message`` for people, and what applies."""

    error: str
    message: str
    allowed: list[str] | None = None
    state: str | None = None
    retry_after: datetime | None = None
    payment_status: str | None = None
    """A Checkout Session's, as Stripe's API answered (a session not paid)."""


def to_json(view: object, indent: bool = False) -> bytes:
    """A view (or a list of views) as JSON, as the API and ``--json`` print it."""
    data = msgspec.json.encode(view)
    return msgspec.json.format(data, indent=2) if indent else data


def to_builtins(view: object) -> Any:
    """A view as plain dicts, lists, strings and numbers (times as ISO-8601 strings)."""
    return msgspec.to_builtins(view)
