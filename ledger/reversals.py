"""What Stripe took back from a payment, read from its refund and dispute events, and the
reversal object a reversal call receives (docs/LEDGER.md, "What a refund takes back").

:func:`taken_of` reads one event's ``data.object`` (a Refund, a Charge or a Dispute) into
the compact JSON record_delivery.lua keeps on the payment: each refund's amount by its id
(a copy, or the events of one refund in any order, count it once), a charge's
``amount_refunded``, a closed dispute's id and status, and for an open one its id and the
type of its event (the payment's view names it, however long its events are kept); and
each refund's and dispute's reason and metadata (ledger/refund_notes.py). A
``charge.dispute.funds_withdrawn`` takes nothing back: the dispute may still be won; a
reversal follows a dispute closed as lost.
"""

from typing import Any, Literal

import msgspec
import orjson

from ledger.purchase import Purchase
from ledger.refund_notes import RefundTaken, note_of, notes_of, refunds_taken
from ledger.refunds_counted import int_map, refunded_amount
from ledger.stored import whole

Obj = dict[str, Any]

FAILED = -1
"""A refund that failed or was canceled: it takes nothing back, whatever came before."""

UNCOUNTED_STATUSES = ("failed", "canceled")


def _refund_amount(refund: Obj) -> int | None:
    amount = refund.get("amount")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount < 0:
        return None
    return FAILED if refund.get("status") in UNCOUNTED_STATUSES else amount


def _whole(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _keep_note(obj: Obj, created: int, event_type: str, taken: dict[str, Any]) -> None:
    note = note_of(obj, created, event_type)
    if note is not None:
        taken.setdefault("notes", {})[obj["id"]] = note


def _read_refunds(
    refunds: list[object], at: int, created: int, event_type: str, taken: dict[str, Any]
) -> None:
    """Each refund's amount by id into ``taken["refunds"]`` and its note into
    ``taken["notes"]``; a failed or canceled one also into ``taken["failed"]`` as ``[amount,
    created, at]``: its amount, when it was made and when it failed (``at``: the event's
    ``created`` if the event is that change, else 0)."""
    for refund in refunds:
        if not (isinstance(refund, dict) and isinstance(refund.get("id"), str)):
            continue
        amount = _refund_amount(refund)
        if amount is None:
            continue
        taken.setdefault("refunds", {})[refund["id"]] = amount
        _keep_note(refund, created, event_type, taken)
        if amount == FAILED:
            failed = [_whole(refund.get("amount")), _whole(refund.get("created")), at]
            taken.setdefault("failed", {})[refund["id"]] = failed


def taken_of(event_type: str, obj: Obj, created: object = None, previous: object = None) -> str:
    """The JSON record_delivery.lua's ``taken`` argument for a refund or dispute event's
    object, or '' when it says nothing about what was taken back. ``created`` (the event's,
    in seconds) dates the charge's figure, and a refund's failure when the event is that
    change (``refund.failed``, or ``previous``, its ``previous_attributes``, has a status):
    a later update of a failed refund says nothing of when it failed."""
    kind = obj.get("object")
    at = _whole(created)
    taken: dict[str, Any] = {}
    refund_type = event_type.startswith(("refund.", "charge.refund."))
    if kind == "refund" and refund_type:
        changed = event_type == "refund.failed" or (
            isinstance(previous, dict) and "status" in previous
        )
        _read_refunds([obj], at if changed else 0, at, event_type, taken)
    elif kind == "charge" and event_type == "charge.refunded":
        listed = obj.get("refunds")
        data = listed.get("data") if isinstance(listed, dict) else None
        _read_refunds(data if isinstance(data, list) else [], 0, at, event_type, taken)
        refunded = obj.get("amount_refunded")
        if isinstance(refunded, int) and not isinstance(refunded, bool) and refunded > 0:
            taken["charge_refunded"], taken["charge_at"] = refunded, at
    elif kind == "dispute" and event_type == "charge.dispute.closed":
        status = obj.get("status")
        if isinstance(obj.get("id"), str) and isinstance(status, str):
            taken["dispute"], taken["dispute_status"] = obj["id"], status[:32]
            taken["dispute_at"] = at
            _keep_note(obj, at, event_type, taken)
    elif kind == "dispute" and event_type.startswith("charge.dispute."):
        if isinstance(obj.get("id"), str) and obj["id"]:
            taken["dispute_open"], taken["dispute_event"] = obj["id"][:255], event_type[:64]
            taken["dispute_at"] = at
            _keep_note(obj, at, event_type, taken)
    return orjson.dumps(taken).decode() if taken else ""


class Reversal(msgspec.Struct, kw_only=True, frozen=True):
    """Why a reversal call is made and what was taken back."""

    why: Literal["refund", "dispute"]
    refund_ids: list[str]
    """The refunds counted (a failed or canceled one is not)."""
    refunds: list[RefundTaken]
    """The same refunds, each with its amount, reason and metadata."""
    refunded_amount: int
    """In the currency's smallest unit: the refunds counted, or a charge's ``amount_refunded``
    if larger."""
    dispute_id: str | None
    dispute_status: str | None
    dispute_reason: str | None
    """The dispute's ``reason`` (``fraudulent``, ``product_not_received``…) as its latest
    event said it."""
    refund_id: str | None
    """The refund this reversal is for (REVERSAL_PER_REFUND); None: the whole payment, or
    what remains of it."""
    refund_reason: str | None
    refund_metadata: dict[str, str] | None
    """That refund's ``reason`` and ``metadata`` (what a merchant's refund names: a line
    item, an order line); None without a ``refund_id``."""
    amount: int | None
    """What this reversal takes back: the refund's amount, else what remains of the payment
    (the amount paid less what earlier reversals of it carried: 0 once refunds reversed
    before the amount paid was known carried it all); None when the amount paid is not known
    (a payment only a thin event paid, then a dispute lost): what remains of it."""


class ReversalCall(Purchase, kw_only=True, frozen=True):
    """What a reversal action receives: the purchase, its own idempotency key
    (``reverse:{payment_key}``, or ``reverse:{payment_key}:{refund_id}`` for one refund; never
    the fulfilment's) and the reversal."""

    reversal: Reversal


def reversal_key(payment_key: str, refund_id: str | None = None) -> str:
    return f"reverse:{payment_key}:{refund_id}" if refund_id else f"reverse:{payment_key}"


REFULFIL_PREFIX = "refulfil:"


def refulfil_key(payment_key: str) -> str:
    """The idempotency key of a fulfilment again after a dispute won (never the first's)."""
    return REFULFIL_PREFIX + payment_key


def is_refulfil_key(idempotency_key: str) -> bool:
    """A downstream's order or call under this key is a re-grant after a dispute won, not a
    second effect of the payment (REVERSAL_DISPUTE_WON=fulfil)."""
    return idempotency_key.startswith(REFULFIL_PREFIX)


def refulfil_of(purchase: Purchase, stored: dict[str, str]) -> Purchase:
    """The purchase a fulfilment again after a dispute won passes, under its own key, its
    ``amount`` what it grants again: what the dispute's reversal took. With refunds reversed
    on their own (REVERSAL_PER_REFUND, ``rv``) that is less than was paid, as those refunds
    stand: the whole amount would grant the customer what they were refunded."""
    key = refulfil_key(purchase.payment_key)
    failed = int_map(stored.get("rv_failed"))  # failed since, and granted back by a person
    refunds = int_map(stored.get("rf"))  # -1: failed or canceled since, held or not
    reversed_each = int_map(stored.get("rv"))
    standing = sum(a for r, a in reversed_each.items() if r not in failed and refunds.get(r) != -1)
    took = whole(stored.get("reversed_amount"))
    if not standing or took is None or purchase.amount is None:
        return msgspec.structs.replace(purchase, idempotency_key=key)
    amount = max(0, min(purchase.amount, took) - standing)
    return msgspec.structs.replace(purchase, idempotency_key=key, amount=amount)


def reversal_of(purchase: Purchase, stored: dict[str, str]) -> ReversalCall:
    """The reversal call for ``purchase`` from the payment hash's ``rf``, ``rf_charge`` (with
    ``rf_charge_at``, ``rf_failed``), ``dispute``, ``notes``, ``reversal_why``,
    ``reversal_refund`` and ``reversal_amount`` fields."""
    counted = {rid: amount for rid, amount in int_map(stored.get("rf")).items() if amount > 0}
    dispute_id, _, status = (stored.get("dispute") or "").partition(" ")
    why: Literal["refund", "dispute"] = (
        "dispute" if stored.get("reversal_why") == "dispute" else "refund"
    )
    refund_id = stored.get("reversal_refund") or None
    notes = notes_of(stored)
    own = notes.get(refund_id) if refund_id else None
    fields = msgspec.structs.asdict(purchase)
    fields["idempotency_key"] = reversal_key(purchase.payment_key, refund_id)
    return ReversalCall(
        **fields,
        reversal=Reversal(
            why=why,
            refund_ids=sorted(counted),
            refunds=refunds_taken(counted, notes),
            refunded_amount=refunded_amount(stored),
            dispute_id=dispute_id or None,
            dispute_status=status or None,
            dispute_reason=notes[dispute_id][1] if dispute_id in notes else None,
            refund_id=refund_id,
            refund_reason=own[1] if own else None,
            refund_metadata=(own[2] if own else {}) if refund_id else None,
            amount=whole(stored.get("reversal_amount")),
        ),
    )
