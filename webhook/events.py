"""Which payment an event belongs to, and whether it means "paid": one table.

Rules are matched by exact type first, then by the longest type prefix ending in ".".
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from webhook.exceptions import NotAStripeEvent

Obj = dict[str, Any]


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
    invoice cannot be tied to its PaymentIntent, whose own paid events would make a second
    payment, so it counts as paid only with ``FULFIL_UNLINKED_INVOICES``."""


def _field(name: str) -> Callable[[Obj], str | None]:
    return lambda obj: obj.get(name) or None


def _invoice_key(obj: Obj) -> str | None:
    # API 2025-03-31.basil removed invoice.payment_intent: fall back to the invoice id.
    return obj.get("payment_intent") or obj.get("id") or None


def _session_paid(obj: Obj) -> bool:
    # A subscription-mode session is paid by its first invoice, which sends its own paid
    # events for the same PaymentIntent: counting the session too would fulfil twice.
    return obj.get("mode", "payment") != "subscription" and obj.get("payment_status") in (
        "paid",
        "no_payment_required",
    )


def _session_key(obj: Obj) -> str | None:
    # A session that needs no payment has no PaymentIntent: the session id stands in.
    return obj.get("payment_intent") or obj.get("id") or None


_pi, _pi_of = _field("id"), _field("payment_intent")

RULES: dict[str, Rule] = {
    "payment_intent.succeeded": Rule(_pi, "paid"),
    "payment_intent.payment_failed": Rule(_pi, "failed"),
    "payment_intent.canceled": Rule(_pi, "failed"),
    "payment_intent.": Rule(_pi, "info"),
    "charge.succeeded": Rule(
        _pi_of, "paid", lambda o: o.get("status") == "succeeded" and o.get("paid") is True
    ),
    "charge.failed": Rule(_pi_of, "failed"),
    "charge.refunded": Rule(_pi_of, "refund"),
    "charge.refund.": Rule(_pi_of, "refund"),
    "charge.dispute.": Rule(_pi_of, "refund"),
    "charge.": Rule(_pi_of, "info"),
    "refund.": Rule(_pi_of, "refund"),
    "checkout.session.completed": Rule(_session_key, "paid", _session_paid),
    "checkout.session.async_payment_succeeded": Rule(
        _session_key, "paid", lambda o: o.get("mode", "payment") != "subscription"
    ),
    "checkout.session.async_payment_failed": Rule(_session_key, "failed"),
    "checkout.session.expired": Rule(_session_key, "failed"),
    "invoice.paid": Rule(_invoice_key, "paid", unlinked_invoice=True),
    "invoice.payment_succeeded": Rule(_invoice_key, "info"),
    "invoice.payment_failed": Rule(_invoice_key, "failed"),
}


def rule_for(event_type: str) -> Rule | None:
    """The rule for a type: exact match, else the longest matching prefix."""
    if event_type in RULES:
        return RULES[event_type]
    prefixes = [p for p in RULES if p.endswith(".") and event_type.startswith(p)]
    return RULES[max(prefixes, key=len)] if prefixes else None


@dataclass(frozen=True)
class Classified:
    payment_key: str | None
    role: str
    paid: bool


def classify(event: Obj, paid_types: Iterable[str], unlinked_invoices: bool = False) -> Classified:
    """Map a parsed event to its payment key, role and whether it counts as paid."""
    obj = event["data"]["object"]
    rule = rule_for(event["type"])
    if rule is None:
        return Classified(None, "info", False)
    key = rule.key(obj)
    if not isinstance(key, str):
        key = None
    paid = (
        key is not None
        and rule.role == "paid"
        and event["type"] in paid_types
        and rule.paid_when(obj)
        and (not rule.unlinked_invoice or bool(obj.get("payment_intent")) or unlinked_invoices)
    )
    role = rule.role if rule.role != "paid" or paid else "info"
    return Classified(key, role, paid)


def check_shape(event: object) -> Obj:
    """Return the event if it looks like a Stripe event, else raise NotAStripeEvent."""
    if not isinstance(event, dict):
        raise NotAStripeEvent("body is not a JSON object")
    event_id, event_type, data = event.get("id"), event.get("type"), event.get("data")
    if not isinstance(event_id, str) or not event_id.startswith("evt_") or len(event_id) > 255:
        raise NotAStripeEvent("no evt_ id")
    if not isinstance(event_type, str) or not event_type or len(event_type) > 255:
        raise NotAStripeEvent("no type")
    if not isinstance(data, dict) or not isinstance(data.get("object"), dict):
        raise NotAStripeEvent("no data.object")
    return event
