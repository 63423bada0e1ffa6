"""What Stripe took back from a payment and what its reversal did, as people read it: the
refunds with their amounts (partial ones too), a closed dispute, why the payment was taken
back, and its reversal (due, its attempts, its receipt, a dispute won after it). Read from
the fields record_delivery.lua and the attempt scripts keep on the payment hash
(docs/REVERSAL.md lists them); ledger/reversals.py reads the same fields into the call."""

from datetime import datetime
from typing import Any, Literal

import msgspec
import orjson

from ledger.read.amounts import Amount, amount
from ledger.read.base import View
from ledger.read.timeline import Leg, receipt_of
from ledger.reversals import FAILED, reversal_key
from ledger.stored import count, ms_time, optional, whole

REVERSAL_FIELDS = ("rf", "rf_charge", "dispute", "taken_back", "leg", "reinstated_at")
"""Fields whose presence means the payment has something of this view to show."""


class Refund(View):
    id: str
    amount: Amount | None
    """Null for a refund that failed or was canceled: it takes nothing back."""
    counted: bool


class Dispute(View):
    id: str
    status: str
    """As its ``charge.dispute.closed`` said: ``lost`` takes the payment back; ``won``
    after a reversal holds it for a person."""


class PaymentReversal(View):
    refunds: list[Refund]
    """By refund id; partial refunds are listed and take nothing back on their own."""
    refunded: Amount | None
    """The refunds counted, or a charge event's ``amount_refunded`` when larger."""
    charge_amount_refunded: Amount | None
    dispute: Dispute | None
    taken_back: Literal["refund", "dispute"] | None
    """Refunded in full, or a dispute lost: the payment's effect is not (or no longer) owed."""
    due: bool
    """Its reversal is due, running, waiting for a person, or done (``leg`` reverse)."""
    why: str | None
    due_at: datetime | None
    after_token: int | None
    """The fencing token its reversal began after: its attempts are the later ones."""
    idempotency_key: str | None
    """What the reversal action receives (never the fulfilment's key); null until due."""
    attempts_started: int
    reversed_at: datetime | None
    receipt: dict[str, Any] | None
    """The reversal action's receipt, or a person's word (``{"resolved": ...}``)."""
    reinstated_at: datetime | None
    """A dispute won after its reversal: held for a person since then."""


def leg_of(f: dict[str, str]) -> Leg:
    return "reverse" if f.get("leg") == "reverse" else "fulfil"


def reversal_after(f: dict[str, str]) -> int | None:
    """The token a due reversal began after (its attempts have greater tokens)."""
    return whole(f.get("reversal_from")) if leg_of(f) == "reverse" else None


def _amount(minor_units: int | None, currency: str | None) -> Amount | None:
    return None if minor_units is None else amount(str(minor_units), currency)


def _refunds(stored: str | None) -> dict[str, int]:
    try:
        return msgspec.convert(orjson.loads(stored or "{}"), dict[str, int])
    except (orjson.JSONDecodeError, msgspec.ValidationError):
        return {}


def _key(payment_key: str, f: dict[str, str]) -> str:
    """The due reversal's key: a reversal for one refund (``reversal_refund``) has its own."""
    refund = f.get("reversal_refund")
    return reversal_key(payment_key) + (f":{refund}" if refund else "")


def payment_reversal(payment_key: str, f: dict[str, str]) -> PaymentReversal | None:
    """The view of a payment hash (decoded); None when no refund or dispute touched it."""
    if not any(name in f for name in REVERSAL_FIELDS):
        return None
    currency = f.get("currency")
    refunds = _refunds(f.get("rf"))
    counted = sum(amount for amount in refunds.values() if amount > 0)
    charge = whole(f.get("rf_charge"))
    dispute_id, _, status = (f.get("dispute") or "").partition(" ")
    taken = f.get("taken_back")
    due = leg_of(f) == "reverse"
    after = reversal_after(f)
    return PaymentReversal(
        refunds=[
            Refund(
                id=rid,
                amount=None if amount == FAILED else _amount(amount, currency),
                counted=amount > 0,
            )
            for rid, amount in sorted(refunds.items())
        ],
        refunded=_amount(max(counted, charge or 0), currency) if refunds or charge else None,
        charge_amount_refunded=_amount(charge, currency),
        dispute=Dispute(id=dispute_id, status=status) if dispute_id else None,
        taken_back=taken if taken in ("refund", "dispute") else None,  # type: ignore[arg-type]
        due=due,
        why=optional(f.get("reversal_why")) if due else None,
        due_at=ms_time(f.get("reversal_due_at")) if due else None,
        after_token=after,
        idempotency_key=_key(payment_key, f) if due else None,
        attempts_started=max(0, count(f.get("token")) - after) if after is not None else 0,
        reversed_at=ms_time(f.get("reversed_at")),
        receipt=receipt_of(f.get("reversal_receipt")),
        reinstated_at=ms_time(f.get("reinstated_at")),
    )
