"""What a refund or dispute says about itself: its ``reason`` and ``metadata``, read from its
events and given to the reversal (ledger/reversals.py), so a merchant's code can take back
what a refund's metadata names (one line item of an order) or tell fraud from a customer's
request. Kept on the payment as ``notes`` (JSON: id -> [created, reason, metadata,
updated]), each id's from its latest event by ``created``, an update (``refund.updated``)
after any other event of the same second (refunds.lua keep_taken). A reversal is told the
notes its attempt finds: metadata set after a refund's reversal was called never reaches
it (REVERSAL_PER_REFUND calls it on the refund's first event), so set it when you refund.
At most NOTES_KEPT notes per payment, NOTE_BYTES of metadata each (ledger/limits.py)."""

from typing import Any

import msgspec
import orjson

from ledger.limits import NOTE_BYTES

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
    kept: dict[str, str] = {}
    size = 2
    for k, v in value.items():
        if len(kept) == MAX_KEYS:
            break
        if not (isinstance(k, str) and isinstance(v, str)):
            continue
        k, v = k[:MAX_KEY], v[:MAX_VALUE]
        size += len(orjson.dumps(k)) + len(orjson.dumps(v)) + 2
        if size > NOTE_BYTES:
            break
        kept[k] = v
    return kept


def note_of(obj: dict[str, Any], created: int, event_type: str) -> list[Any] | None:
    """A refund's or dispute's note as refunds.lua keeps it: ``[created, reason, metadata,
    updated]`` (``created``: the event's, which orders the notes of one id; ``updated``: 1
    for an update, which in the same second comes after the event that made the object);
    None without an id."""
    if not isinstance(obj.get("id"), str) or not obj["id"]:
        return None
    reason = obj.get("reason")
    reason = reason[:MAX_REASON] if isinstance(reason, str) and reason else None
    updated = 1 if event_type.endswith(".updated") else 0
    return [created, reason, _metadata(obj.get("metadata")), updated]


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
        if isinstance(note, list) and len(note) >= 3:
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
