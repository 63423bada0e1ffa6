"""Which payment an event belongs to, and whether it means "paid": one table.

Rules are matched by exact type first, then by the longest type prefix ending in ".".
Thin events (``"object": "v2.core.event"``: a type and a ``related_object`` reference, no
``data.object``) have a table of their own, THIN_RULES.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ledger.event_shape import is_thin, related
from ledger.money import paid_amount

Obj = dict[str, Any]
R = TypeVar("R")


@dataclass(frozen=True)
class Rule:
    key: Callable[[Obj], str | None]
    """Payment key from ``data.object``; None when the event has no payment."""
    role: str
    """``paid`` (may trigger fulfilment), ``failed``, ``refund`` or ``info``."""
    paid_when: Callable[[Obj], bool] = lambda obj: True
    """Extra condition for a ``paid`` rule."""
    unlinked_invoice: bool = False
    """An invoice rule: without ``payment_intent`` (API 2025-03-31.basil and later) the
    invoice's own event cannot tie it to its PaymentIntent (``invoice_payment.paid`` does,
    when it comes), whose own paid events would make a second payment, so it counts as paid
    only with ``FULFIL_UNLINKED_INVOICES``."""


def _field(name: str) -> Callable[[Obj], str | None]:
    return lambda obj: obj.get(name) or None


def invoice_payment_intent(obj: Obj) -> str | None:
    """The PaymentIntent an invoice names: ``payment_intent`` before API 2025-03-31.basil,
    else the first PaymentIntent among its ``payments`` (present when expanded)."""
    if isinstance(obj.get("payment_intent"), str):
        return str(obj["payment_intent"])
    payments = obj.get("payments")
    data = payments.get("data") if isinstance(payments, dict) else None
    for item in data if isinstance(data, list) else []:
        payment = item.get("payment") if isinstance(item, dict) else None
        pi = payment.get("payment_intent") if isinstance(payment, dict) else None
        if isinstance(pi, str) and pi:
            return pi
    return None


def _invoice_key(obj: Obj) -> str | None:
    # Without a PaymentIntent (basil and later), the invoice id stands in.
    return invoice_payment_intent(obj) or obj.get("id") or None


def invoice_payment_intent_of(obj: Obj) -> str | None:
    """The PaymentIntent an ``invoice_payment`` object (API 2025-03-31.basil and later) names:
    ``payment.payment_intent`` when ``payment.type`` is ``payment_intent`` (a charge without
    a PaymentIntent, or a payment record, names none)."""
    payment = obj.get("payment")
    if not isinstance(payment, dict) or payment.get("type") != "payment_intent":
        return None
    pi = payment.get("payment_intent")
    return pi if isinstance(pi, str) and pi else None


def _invoice_payment_key(obj: Obj) -> str | None:
    # Paid: the PaymentIntent, its invoice tied to it (_linked), else the invoice's own key.
    # An open or canceled one may name a PaymentIntent that never pays the invoice: no tie.
    if obj.get("status") != "paid":
        return None
    invoice = obj.get("invoice")
    return invoice_payment_intent_of(obj) or (invoice if isinstance(invoice, str) else None)


def _session_paid(obj: Obj) -> bool:
    # Only payment mode pays here: a subscription session is paid by its first invoice, which
    # sends its own paid events; a setup session takes no payment at all.
    return obj.get("mode", "payment") == "payment" and obj.get("payment_status") in (
        "paid",
        "no_payment_required",
    )


def _session_key(obj: Obj) -> str | None:
    # A session that needs no payment has no PaymentIntent: the session id stands in.
    return obj.get("payment_intent") or obj.get("id") or None


def _captured_charge(obj: Obj) -> bool:
    # Authorisation is not payment: a manual-capture charge succeeds with captured false.
    return (
        obj.get("status") == "succeeded" and obj.get("paid") is True and obj.get("captured") is True
    )


_pi, _pi_of = _field("id"), _field("payment_intent")

RULES: dict[str, Rule] = {
    "payment_intent.succeeded": Rule(_pi, "paid"),
    "payment_intent.payment_failed": Rule(_pi, "failed"),
    "payment_intent.canceled": Rule(_pi, "failed"),
    "payment_intent.": Rule(_pi, "info"),  # amount_capturable_updated included: not paid
    "charge.succeeded": Rule(_pi_of, "paid", _captured_charge),
    "charge.captured": Rule(_pi_of, "paid", _captured_charge),
    "charge.failed": Rule(_pi_of, "failed"),
    "charge.refunded": Rule(_pi_of, "refund"),
    "charge.refund.": Rule(_pi_of, "refund"),
    "charge.dispute.": Rule(_pi_of, "refund"),
    "charge.": Rule(_pi_of, "info"),
    "refund.": Rule(_pi_of, "refund"),
    "checkout.session.completed": Rule(_session_key, "paid", _session_paid),
    "checkout.session.async_payment_succeeded": Rule(
        _session_key, "paid", lambda o: o.get("mode", "payment") == "payment"
    ),
    "checkout.session.async_payment_failed": Rule(_session_key, "failed"),
    "checkout.session.expired": Rule(_session_key, "failed"),
    "invoice.paid": Rule(_invoice_key, "paid", unlinked_invoice=True),
    "invoice.payment_succeeded": Rule(_invoice_key, "info"),
    "invoice.payment_failed": Rule(_invoice_key, "failed"),
    # The tie between an invoice and its PaymentIntent since API basil: never paid itself
    # (the PaymentIntent's or the invoice's own paid events pay), it joins the two records.
    "invoice_payment.paid": Rule(_invoice_payment_key, "info"),
}


@dataclass(frozen=True)
class ThinRule:
    related_type: str
    """The payment key is the id of the related object when it is of this type."""
    role: str
    """As in Rule; ``paid`` only counts when PAID_EVENT_TYPES lists the thin type too."""


# Only a PaymentIntent's own id is its payment key: a thin charge, session or invoice event
# names an id the ledger could not tie to its PaymentIntent without fetching the object.
THIN_PAID = "v1.payment_intent.succeeded"
"""The one thin type that may pay (when PAID_EVENT_TYPES lists it): it names its PaymentIntent."""

THIN_RULES: dict[str, ThinRule] = {
    THIN_PAID: ThinRule("payment_intent", "paid"),
    "v1.payment_intent.payment_failed": ThinRule("payment_intent", "failed"),
    "v1.payment_intent.canceled": ThinRule("payment_intent", "failed"),
    "v1.payment_intent.": ThinRule("payment_intent", "info"),
}


# ``stripe listen --events`` and an endpoint's enabled events take exact types, no prefixes:
# the Stripe event types each prefix rule above that is not ``info`` covers today
# (ledger/subscriptions.py asks for them).
PREFIX_MEMBERS: dict[str, tuple[str, ...]] = {
    "charge.refund.": ("charge.refund.updated",),
    "charge.dispute.": (
        "charge.dispute.created",
        "charge.dispute.updated",
        "charge.dispute.closed",
        "charge.dispute.funds_withdrawn",
        "charge.dispute.funds_reinstated",
    ),
    "refund.": ("refund.created", "refund.updated", "refund.failed"),
}


def _lookup(table: dict[str, R], event_type: str) -> R | None:
    if event_type in table:
        return table[event_type]
    prefixes = [p for p in table if p.endswith(".") and event_type.startswith(p)]
    return table[max(prefixes, key=len)] if prefixes else None


def rule_for(event_type: str) -> Rule | None:
    """The rule for a type: exact match, else the longest matching prefix."""
    return _lookup(RULES, event_type)


@dataclass(frozen=True)
class Policy:
    """What this deployment fulfils: from settings, fixed per process."""

    paid_types: frozenset[str]
    unlinked_invoices: bool = False
    mode: str = "live"
    """``live``, ``test`` or ``any``: events of the other mode are held, never fulfilled."""
    connect: bool = False
    """Whether events of connected accounts (top-level ``account``) fulfil."""


@dataclass(frozen=True)
class Classified:
    payment_key: str | None
    role: str
    paid: bool
    linked: tuple[str, ...] = ()
    """Other ids Stripe itself ties to this payment (a session's invoice, an invoice's PI)."""
    hold: str = ""
    """Why a paid event must wait for a person instead of fulfilling ('' if it need not)."""
    account: str = ""
    """The connected account of a Connect event ('' for the platform's own)."""
    fingerprint: str = ""
    """For a paid event that Stripe may not tie to its purchase (an invoice without a
    PaymentIntent, or a PaymentIntent with unlinked invoices on):
    ``kind|mode:customer:currency:amount`` (no customer for a guest) so the ledger can hold a
    possible duplicate purchase. '' otherwise."""


def classify(event: Obj, policy: Policy) -> Classified:
    """Map a parsed event to its payment key, role, and whether and how it counts as paid."""
    if is_thin(event):
        return _classify_thin(event, policy)
    obj = event["data"]["object"]
    rule = rule_for(event["type"])
    if rule is None:
        return Classified(None, "info", False)
    key = rule.key(obj)
    if not isinstance(key, str):
        key = None
    unlinked = rule.unlinked_invoice and not invoice_payment_intent(obj) and not _free(obj)
    paid = (
        key is not None
        and rule.role == "paid"
        and event["type"] in policy.paid_types
        and rule.paid_when(obj)
        and (not unlinked or policy.unlinked_invoices)
    )
    role = rule.role if rule.role != "paid" or paid else "info"
    account = str(event["account"]) if isinstance(event.get("account"), str) else ""
    return Classified(
        key,
        role,
        paid,
        linked=_linked(obj, key),
        hold=_hold(event, account, policy) if paid else "",
        account=account,
        fingerprint=_fingerprint(obj, event, unlinked) if paid and policy.unlinked_invoices else "",
    )


FREE = ("amount_paid", "amount_due")
"""Both 0 (JSON whole numbers, not ``false``) on an invoice that charged nothing."""


def _free(invoice: Obj) -> bool:
    """An invoice that charged nothing (a trial, a 100 % coupon, a credit balance): no
    PaymentIntent exists or will, so none can fulfil its purchase a second time."""
    return all(type(invoice.get(name)) is int and not invoice[name] for name in FREE)


def _classify_thin(event: Obj, policy: Policy) -> Classified:
    """A thin event joins a payment only where THIN_RULES maps its type and related object."""
    rule = _lookup(THIN_RULES, event["type"])
    related_type, related_id = related(event)
    if rule is None or related_type != rule.related_type or not related_id:
        return Classified(None, "info", False)
    paid = rule.role == "paid" and event["type"] in policy.paid_types
    role = rule.role if rule.role != "paid" or paid else "info"
    # A thin event names its connected account in ``context``.
    account = str(event["context"]) if isinstance(event.get("context"), str) else ""
    hold = _hold(event, account, policy) if paid else ""
    return Classified(related_id, role, paid, hold=hold, account=account)


def _linked(obj: Obj, key: str | None) -> tuple[str, ...]:
    """Ids this object ties together besides its key: its PaymentIntent, invoice, own id
    (an invoice's, or a Checkout Session's: the landing page asks by the session's id); an
    ``invoice_payment``'s invoice (its key is its PaymentIntent)."""
    found = [obj.get("payment_intent"), obj.get("invoice"), invoice_payment_intent(obj)]
    if str(obj.get("id", "")).startswith(("in_", "cs_")):
        found.append(obj.get("id"))
    ids = [i for i in found if isinstance(i, str) and i and i != key and len(i) <= 255]
    return tuple(dict.fromkeys(ids))


def _hold(event: Obj, account: str, policy: Policy) -> str:
    livemode = event.get("livemode") is True
    if policy.mode == "live" and not livemode:
        return "test-mode event in a live deployment (STRIPE_MODE=live)"
    if policy.mode == "test" and livemode:
        return "live-mode event in a test deployment (STRIPE_MODE=test)"
    if account and not policy.connect:
        return f"Connect event of account {account} (FULFIL_CONNECT is off)"
    return ""


def _fingerprint(obj: Obj, event: Obj, unlinked: bool) -> str:
    """``kind|mode:customer:currency:amount``; the customer is empty for a guest. '' for
    an amount or currency record_delivery.lua's ``fp_parts`` cannot read (ASCII letters, a
    whole number from 0): it would refuse the whole delivery."""
    customer = obj.get("customer")
    amount, currency = paid_amount(obj), obj.get("currency")
    if not amount or amount < 0 or not isinstance(currency, str):
        return ""  # a free purchase: nothing was charged, no charge of it comes to tie to
    if not (currency.isascii() and currency.isalpha()):
        return ""
    if not isinstance(customer, str) or not customer or ":" in customer:
        customer = ""  # a guest: compared by mode, currency and amount only
    kind = "invoice" if unlinked else "pi"
    mode = "live" if event.get("livemode") is True else "test"
    return f"{kind}|{mode}:{customer}:{currency}:{amount}"
