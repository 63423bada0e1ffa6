"""What Stripe took back from a payment and what its reversal did, as people read it: the
refunds with their amounts (partial ones too) and what each one's reversal took back, a
closed dispute, why the payment was taken back, its reversal (due, its attempts, its
receipt), a dispute won after it and its fulfilment again. Read from
the fields record_delivery.lua and the attempt scripts keep on the payment hash
(docs/REVERSAL.md lists them); ledger/reversals.py reads the same fields into the call."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, cast

import msgspec
import orjson

from ledger.read.amounts import Amount, amount
from ledger.read.base import View
from ledger.read.timeline import LEGS, Leg, PaymentEvent, receipt_of
from ledger.refunds_counted import refunded_amount
from ledger.reversals import FAILED, refulfil_key, reversal_key
from ledger.stored import count, ms_time, optional, whole

REVERSAL_FIELDS = ("rf", "rf_charge", "dispute", "taken_back", "leg", "reinstated_at", "rv")
"""Fields whose presence means the payment has something of this view to show."""


class Refund(View):
    id: str
    amount: Amount | None
    """Null for a refund that failed or was canceled (it takes nothing back), or whose
    payment's currency is not known (only a thin event paid it: ``minor_units`` says)."""
    minor_units: int | None
    """What it takes back in the currency's smallest unit; null when it failed or was
    canceled."""
    counted: bool
    reversed: Amount | None
    """What its own reversal took back (``REVERSAL_PER_REFUND``); null until one did."""
    reversal_key: str | None
    """The key its own reversal was called under (``reverse:{payment_key}:{refund_id}``);
    null until one was done."""


class Dispute(View):
    id: str
    status: str
    """As its ``charge.dispute.closed`` said: ``lost`` takes the payment back; ``won``
    after a reversal holds it for a person."""


class Refulfil(View):
    """A payment fulfilled again after a dispute won after its reversal: the fulfilment
    action called once more under its own key (``leg`` refulfil)."""

    after_token: int | None
    """The fencing token it began after: its attempts are the later ones."""
    idempotency_key: str
    attempts_started: int
    refulfilled_at: datetime | None
    receipt: dict[str, Any] | None
    """The fulfilment action's receipt of it, or a person's word (``{"resolved": ...}``)."""


class PaymentReversal(View):
    refunds: list[Refund]
    """By refund id; partial refunds are listed and take nothing back on their own."""
    refunded: Amount | None
    """The refunds counted, or the latest charge event's ``amount_refunded`` when larger (less
    the refunds it counted that failed since)."""
    charge_amount_refunded: Amount | None
    dispute: Dispute | None
    open_dispute: str | None
    """While a dispute is open (its events came, none closed it): the type of its latest
    event by its ``created`` (``charge.dispute.created``, ``.funds_withdrawn``, ``.updated``,
    ``.funds_reinstated``). It takes nothing back: it may still be won; a reversal follows
    only a close as lost."""
    taken_back: Literal["refund", "dispute"] | None
    """Refunded in full, or a dispute lost: the payment's effect is not (or no longer) owed."""
    due: bool
    """Its reversal is due, running, waiting for a person, or done (``leg`` reverse, or
    refulfil: done, then a dispute won)."""
    why: str | None
    due_at: datetime | None
    after_token: int | None
    """The fencing token its reversal began after: its attempts are the later ones."""
    idempotency_key: str | None
    """The key the reversal action receives (never the fulfilment's): the reversal's due or
    running, else the last one of the whole payment or of what remains; null until due, and
    when each reversal done was one refund's (its key is on the refund)."""
    attempts_started: int
    reversed_at: datetime | None
    receipt: dict[str, Any] | None
    """The reversal action's receipt, or a person's word (``{"resolved": ...}``)."""
    reversed_amount: Amount | None
    """What every reversal of the payment has carried (per refund and the rest)."""
    reinstated_at: datetime | None
    """Given back after it was taken back (a dispute won, a refund failed): held for a person
    since then, or fulfilled again."""
    refulfil: Refulfil | None
    """Its fulfilment again after that dispute won (REVERSAL_DISPUTE_WON=fulfil)."""
    taken_back_again: Literal["refund", "dispute"] | None
    """Granted again after its reversal, then taken back again: held for a person to take it
    back by hand (its reversal does not run twice); null once they resolved it."""
    taken_back_by_hand_at: datetime | None
    """When a person resolved that: it was then reversed."""


AFTER_REVERSAL = ("reverse", "refulfil")
"""The legs of a payment whose reversal is due or done (a settlement's is not)."""


def leg_of(f: dict[str, str]) -> Leg:
    leg = f.get("leg")
    return cast(Leg, leg) if leg in LEGS else "fulfil"


def reversal_after(f: dict[str, str]) -> int | None:
    """The token a due (or done, then fulfilled again) reversal began after: its attempts
    have greater tokens."""
    return whole(f.get("reversal_from")) if leg_of(f) in AFTER_REVERSAL else None


def _amount(minor_units: int | None, currency: str | None) -> Amount | None:
    return None if minor_units is None else amount(str(minor_units), currency)


def _refunds(stored: str | None) -> dict[str, int]:
    try:
        return msgspec.convert(orjson.loads(stored or "{}"), dict[str, int])
    except (orjson.JSONDecodeError, msgspec.ValidationError):
        return {}


def _key(payment_key: str, f: dict[str, str], reversed_each: dict[str, int]) -> str | None:
    """The key of the reversal begun and not done (one refund's has its own), else of the
    last reversal of the whole payment or of what remains; None when every reversal done was
    one refund's (REVERSAL_PER_REFUND: each refund's key is on the refund)."""
    refund = f.get("reversal_refund")
    if refund:
        return reversal_key(payment_key, refund)
    begun = "reversal_amount" in f  # set when one begins, dropped when it is done
    if begun or count(f.get("rest_reversed")) or not reversed_each:
        return reversal_key(payment_key)
    return None


def taken_back_now(f: dict[str, str]) -> str | None:
    """Why Stripe takes the payment back now, as refunds.lua's taken_back reads its fields:
    not the stored ``taken_back``, which stays until the ledger next acts on the payment."""
    paid, refunded = whole(f.get("amount")), refunded_amount(f)
    if paid and refunded >= paid:
        return "refund"
    if (f.get("dispute") or "").endswith(" lost"):
        return "dispute"
    # no paid record (purged, or paid before the ledger ran): the amount paid is not known,
    # so any refund counted says it
    return "refund" if not f.get("paid_at") and refunded > 0 else None


UNDECIDED = ("pending", "in_progress", "interrupted")
"""States in which the ledger has not acted on a taking back yet: its stored ``taken_back``
may be one Stripe has undone since (a dispute lost, then won). So may a payment's held for a
person to say whether a call applied (lua/take_back_steps.lua hold_taken_back; not one only
a person grants, ``by_hand``): they are not offered --not-applied on a taking back that no
longer is (operator.lua refuses it then)."""


def _refulfil(payment_key: str, f: dict[str, str]) -> Refulfil | None:
    if leg_of(f) != "refulfil":
        return None
    after = whole(f.get("refulfil_from"))
    return Refulfil(
        after_token=after,
        idempotency_key=refulfil_key(payment_key),
        attempts_started=max(0, count(f.get("token")) - (after or 0)),
        refulfilled_at=ms_time(f.get("refulfilled_at")),
        receipt=receipt_of(f.get("refulfil_receipt")),
    )


DISPUTE_EVENTS, CLOSED = "charge.dispute.", "charge.dispute.closed"


def closed_disputes(f: dict[str, str]) -> set[str]:
    """The ids of the payment's closed disputes (``disputes``; ``dispute`` alone as kept
    before it)."""
    try:
        closes = orjson.loads(f.get("disputes") or "{}")
    except orjson.JSONDecodeError:
        closes = {}
    return {
        *(closes if isinstance(closes, dict) else ()),
        (f.get("dispute") or "").partition(" ")[0],
    }


def open_dispute(f: dict[str, str], events: Sequence[PaymentEvent]) -> str | None:
    """The type of the latest event of a dispute no closed one has the id of
    (``dispute_open``, kept on the payment as long as it is); for a payment recorded before
    it was kept, read from its events while they are."""
    opened, _, latest = (f.get("dispute_open") or "").partition(" ")
    if opened:
        return None if opened in closed_disputes(f) else latest
    if f.get("dispute"):
        return None
    disputes = [e.type for e in events if (e.type or "").startswith(DISPUTE_EVENTS)]
    return None if not disputes or CLOSED in disputes else disputes[-1]


def payment_reversal(
    payment_key: str, f: dict[str, str], events: Sequence[PaymentEvent] = ()
) -> PaymentReversal | None:
    """The view of a payment hash (decoded) and its events; None when no refund or dispute
    touched it."""
    disputed = open_dispute(f, events)
    if not disputed and not any(name in f for name in REVERSAL_FIELDS):
        return None
    currency = f.get("currency")
    refunds, reversed_each = _refunds(f.get("rf")), _refunds(f.get("rv"))
    charge = whole(f.get("rf_charge"))
    dispute_id, _, status = (f.get("dispute") or "").partition(" ")
    taken, retake = f.get("taken_back"), f.get("retake")
    asks = f.get("state") == "held" and not f.get("by_hand")
    if f.get("state") in UNDECIDED or asks or (taken is None and f.get("state") == "reversed"):
        # reversed refund by refund (REVERSAL_PER_REFUND) up to the amount paid: no take-back
        # of the whole payment stored it, yet it is one
        taken = taken_back_now(f)
    due = leg_of(f) in AFTER_REVERSAL
    after = reversal_after(f)
    refulfil = _refulfil(payment_key, f)
    upto = refulfil.after_token if refulfil and refulfil.after_token else count(f.get("token"))
    return PaymentReversal(
        refunds=[
            Refund(
                id=rid,
                amount=None if amount == FAILED else _amount(amount, currency),
                minor_units=None if amount == FAILED else amount,
                counted=amount > 0,
                reversed=_amount(reversed_each.get(rid), currency),
                reversal_key=reversal_key(payment_key, rid) if rid in reversed_each else None,
            )
            for rid, amount in sorted(refunds.items())
        ],
        refunded=_amount(refunded_amount(f), currency) if refunds or charge else None,
        charge_amount_refunded=_amount(charge, currency),
        dispute=Dispute(id=dispute_id, status=status) if dispute_id else None,
        open_dispute=disputed,
        taken_back=taken if taken in ("refund", "dispute") else None,  # type: ignore[arg-type]
        due=due,
        why=optional(f.get("reversal_why")) if due else None,
        due_at=ms_time(f.get("reversal_due_at")) if due else None,
        after_token=after,
        idempotency_key=_key(payment_key, f, reversed_each) if due else None,
        attempts_started=max(0, upto - after) if after is not None else 0,
        reversed_at=ms_time(f.get("reversed_at")),
        receipt=receipt_of(f.get("reversal_receipt")),
        reversed_amount=_amount(whole(f.get("reversed_amount")), currency),
        reinstated_at=ms_time(f.get("reinstated_at")),
        refulfil=refulfil,
        taken_back_again=retake if retake in ("refund", "dispute") else None,  # type: ignore[arg-type]
        taken_back_by_hand_at=ms_time(f.get("retaken_at")),
    )
