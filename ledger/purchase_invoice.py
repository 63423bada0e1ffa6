"""An invoice's part of the purchase: its id, subscription, billing reason and the lines its
event carried (ledger/purchase_fields.py keeps them as ``p_in_lines``)."""

from typing import Any

import msgspec
import orjson


class LinePeriod(msgspec.Struct, kw_only=True, frozen=True):
    start: int
    """Unix seconds."""
    end: int


class InvoiceLine(msgspec.Struct, kw_only=True, frozen=True):
    """One line as the invoice's event carries it (Stripe sends the first lines only)."""

    id: str | None
    description: str | None
    quantity: int | None
    amount: int | None
    currency: str | None
    price: str | None
    product: str | None
    period: LinePeriod | None
    """What it bills for: a subscription's line, the service period to grant (Stripe's
    guide provisions on ``invoice.paid`` until its end)."""
    metadata: dict[str, str]
    """The line's own: a subscription's metadata is on its lines, not on the invoice."""


class Invoice(msgspec.Struct, kw_only=True, frozen=True):
    id: str
    subscription: str | None
    billing_reason: str | None
    lines: list[InvoiceLine]


def _lines(stored: str | None) -> list[InvoiceLine]:
    """An invoice's lines; those an earlier release kept have no ``period`` or ``metadata``."""
    try:
        found = orjson.loads(stored) if stored else []
    except orjson.JSONDecodeError:
        return []
    if not isinstance(found, list):
        return []
    earlier: dict[str, Any] = {"period": None, "metadata": {}}
    try:
        return msgspec.convert(
            [{**earlier, **x} if isinstance(x, dict) else x for x in found], list[InvoiceLine]
        )
    except msgspec.ValidationError:
        return []


def invoice_of(f: dict[str, str]) -> Invoice | None:
    """The invoice of a payment hash's purchase fields, if it names one."""
    if not f.get("p_in"):
        return None
    return Invoice(
        id=f["p_in"],
        subscription=f.get("p_sub") or None,
        billing_reason=f.get("p_in_reason") or None,
        lines=_lines(f.get("p_in_lines")),
    )
