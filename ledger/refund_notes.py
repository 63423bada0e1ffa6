"""What a refund or dispute says about itself: its ``reason`` and ``metadata``, read from its
events and given to the reversal (ledger/reversals.py), so a merchant's code can take back
what a refund's metadata names (one line item of an order) or tell fraud from a customer's
request. Kept on the payment as ``notes`` (JSON: id -> [created, reason, metadata]), each
id's from its latest event by ``created`` (refunds.lua keep_notes): a refund's metadata
may be changed after it was made, and ``refund.updated`` tells it."""

from typing import Any

import msgspec
import orjson

Note = tuple[int, str | None, dict[str, str]]

MAX_KEYS, MAX_KEY, MAX_VALUE, MAX_REASON = 50, 40, 500, 64
"""Stripe's own bounds on metadata (50 keys of 40 characters, values of 500): a payment's
hash holds no more than Stripe could send."""


class RefundTaken(msgspec.Struct, kw_only=True, frozen=True):
    """One refund counted for the payment, as its latest event said it."""

    id: str
    amount: int
    reason: str | None
    """Stripe's: ``duplicate``, ``fraudulent``, ``requested_by_customer``,
    ``expired_uncaptured_charge``, or None (none given, or no event said)."""
    metadata: dict[str, str]
    """The refund's metadata as its latest event said it ({} when none, or no event said)."""


def _metadata(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    kept = [(k, v) for k, v in value.items() if isinstance(k, str) and isinstance(v, str)]
    return {k[:MAX_KEY]: v[:MAX_VALUE] for k, v in kept[:MAX_KEYS]}


def note_of(obj: dict[str, Any], created: int) -> list[Any] | None:
    """A refund's or dispute's note as refunds.lua keeps it: ``[created, reason, metadata]``
    (``created``: the event's, which orders the notes of one id); None without an id."""
    if not isinstance(obj.get("id"), str) or not obj["id"]:
        return None
    reason = obj.get("reason")
    reason = reason[:MAX_REASON] if isinstance(reason, str) and reason else None
    return [created, reason, _metadata(obj.get("metadata"))]


def notes_of(stored: dict[str, str]) -> dict[str, Note]:
    """The payment hash's ``notes`` by id; {} when there are none or they are not readable."""
    try:
        notes = orjson.loads(stored.get("notes") or "{}")
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(notes, dict):
        return {}
    read: dict[str, Note] = {}
    for id_, note in notes.items():
        if isinstance(note, list) and len(note) == 3:
            reason = note[1] if isinstance(note[1], str) else None
            read[id_] = (note[0], reason, _metadata(note[2]))
    return read


def refunds_taken(counted: dict[str, int], notes: dict[str, Note]) -> list[RefundTaken]:
    """The refunds counted (id -> amount), each with its note, by id."""
    return [
        RefundTaken(
            id=id_,
            amount=amount,
            reason=notes[id_][1] if id_ in notes else None,
            metadata=notes[id_][2] if id_ in notes else {},
        )
        for id_, amount in sorted(counted.items())
    ]
