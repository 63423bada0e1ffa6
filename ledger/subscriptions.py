"""Which Stripe event types a deployment asks for, from the event table and its settings.

The endpoint's list (``webhook-ledger event-types``, docs/STRIPE.md) and the ``stripe
listen --events`` lines name every type the table names exactly; with REVERSAL_ACTION set,
also every refund and dispute type (``charge.refund.*``, ``charge.dispute.*``, ``refund.*``
are prefix rules, so their members are listed: ``PREFIX_MEMBERS``). Without it,
``charge.refunded`` alone (an exact type) tells a full refund, which keeps a payment refunded
before its fulfilment from being fulfilled.

What the settings *need* (``webhook-ledger check-endpoint`` fails without it) is less: the
paid types PAID_EVENT_TYPES fulfils on, ``invoice_payment.paid`` when one of them may pay an
invoice's PaymentIntent or the invoice (the only tie between the two since API basil), and
with REVERSAL_ACTION set every refund and dispute type. The other listed types are recorded
for context.
"""

from ledger.events import PREFIX_MEMBERS, RULES, THIN_RULES
from ledger.settings import Settings

REFUND_TYPES: tuple[str, ...] = tuple(
    sorted(
        {t for t, rule in RULES.items() if rule.role == "refund" and not t.endswith(".")}
        | {m for prefix, members in PREFIX_MEMBERS.items() for m in members}
    )
)
"""Every refund and dispute type: what a reversal follows."""

WHY_PAID = "PAID_EVENT_TYPES lists it: it fulfils a payment"
TIE = "invoice_payment.paid"
WHY_TIE = (
    "ties an invoice to its PaymentIntent (API 2025-03-31.basil and later): without it a"
    " renewal's purchase names no invoice or subscription"
)
INVOICE_PAYERS = frozenset(
    {"payment_intent.succeeded", "charge.succeeded", "charge.captured", "invoice.paid"}
)
"""Paid types that may pay an invoice (its PaymentIntent's, or its own)."""
WHY_REVERSAL = "REVERSAL_ACTION is set: a refund or a lost dispute reverses a payment"


def snapshot_types(reversal: bool) -> tuple[str, ...]:
    """The snapshot types to ask Stripe for: every type the table names exactly, and with
    ``reversal`` every refund and dispute type, sorted."""
    exact = {t for t in RULES if not t.endswith(".")}
    return tuple(sorted(exact | (set(REFUND_TYPES) if reversal else set())))


def thin_types() -> tuple[str, ...]:
    """The thin types the thin table names exactly (an event destination of its own)."""
    return tuple(sorted(t for t in THIN_RULES if not t.endswith(".")))


def forwarded_types(reversal: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``stripe listen``'s lists: (snapshot types, thin types)."""
    return snapshot_types(reversal), thin_types()


def needed(settings: Settings) -> dict[str, str]:
    """The snapshot types these settings cannot do without, each with why, sorted: the paid
    types they fulfil on, the tie of an invoice and its PaymentIntent, and with
    REVERSAL_ACTION every refund and dispute type. (A thin type comes through an event
    destination, not a webhook endpoint.)"""
    found = {t: WHY_PAID for t in settings.PAID_EVENT_TYPES if t in RULES}
    if INVOICE_PAYERS & set(settings.PAID_EVENT_TYPES):
        found[TIE] = WHY_TIE
    if settings.reversal_on:
        found |= dict.fromkeys(REFUND_TYPES, WHY_REVERSAL)
    return dict(sorted(found.items()))
