"""An invoice's part of the purchase: its id, subscription, billing reason and lines, and
whether those lines are all of them (``lines_complete``).

Its event carries the first page of lines only (``lines.has_more`` when there are more), and
ledger/purchase_fields.py keeps of those what fits MAX_VALUE (``p_in_lines``, with
``p_in_more`` "1" when either left lines out). With INVOICE_LINES, a payment whose lines are
not all there has every line read once from Stripe's API before its first attempt
(ledger/purchase_reads.py) and kept apart (``p_in_lines_all``, never capped): the purchase
gives those then.
"""

from typing import Any

import msgspec
import orjson

EVENT_LINES = "p_in_lines"
"""The lines the invoice's event carried, as far as they fit MAX_VALUE."""

LINES_LEFT_OUT = "p_in_more"
"""Written with EVENT_LINES by the same event: "1" when lines were left out, "0" when not.
Lines an earlier release kept have none: taken as complete, as the purchase said then. An
invoice no invoice event brought (a PaymentIntent's ``invoice`` names it) has neither: its
lines are not known, so not complete."""

ALL_LINES = "p_in_lines_all"
"""Every line, read from Stripe's API (INVOICE_LINES), in EVENT_LINES' shape."""


class LinePeriod(msgspec.Struct, kw_only=True, frozen=True):
    start: int
    """Unix seconds."""
    end: int


class InvoiceLine(msgspec.Struct, kw_only=True, frozen=True):
    """One line of the invoice: from its event, or every one read from Stripe's API
    (INVOICE_LINES); ``Invoice.lines_complete`` says which."""

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
    lines_complete: bool
    """False when ``lines`` are only the first of them (Stripe's event carried one page,
    ``has_more``, or the ledger's cap cut some) or none are known (no invoice event came),
    and they were not read from Stripe's API (INVOICE_LINES)."""


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


def lines_known_complete(f: dict[str, str]) -> bool:
    """Whether the lines an event carried are all of the invoice's."""
    if LINES_LEFT_OUT in f:
        return f[LINES_LEFT_OUT] != "1"
    return EVENT_LINES in f  # kept by an earlier release, which wrote no flag


def invoice_of(f: dict[str, str]) -> Invoice | None:
    """The invoice of a payment hash's purchase fields, if it names one."""
    if not f.get("p_in"):
        return None
    read = ALL_LINES in f
    return Invoice(
        id=f["p_in"],
        subscription=f.get("p_sub") or None,
        billing_reason=f.get("p_in_reason") or None,
        lines=_lines(f[ALL_LINES] if read else f.get(EVENT_LINES)),
        lines_complete=read or lines_known_complete(f),
    )
