"""Amounts as Stripe sends them (integer minor units) and as text for people (the typed
amount a payment shows is ``Amount`` in ledger/read/payments.py).

Stripe's own convention decides how many minor units make one unit, not ISO 4217's: ISK,
HUF and TWD keep two decimals in the API although their ISO exponent or payouts have none.
The lists are Stripe's "zero-decimal" and "three-decimal" currencies.
"""

from typing import Any, TypeGuard

ZERO_DECIMAL = frozenset("bif clp djf gnf jpy kmf krw mga pyg rwf ugx vnd vuv xaf xof xpf".split())
THREE_DECIMAL = frozenset("bhd jod kwd omr tnd".split())


def exponent(currency: str) -> int:
    """Digits after the decimal point of ``currency`` in Stripe's amounts."""
    code = currency.lower()
    return 0 if code in ZERO_DECIMAL else 3 if code in THREE_DECIMAL else 2


def format_minor(minor_units: int, currency: str) -> str:
    """2000 usd -> '20.00 USD'; 2000 jpy -> '2,000 JPY'; -150 usd -> '-1.50 USD'."""
    digits = exponent(currency)
    sign = "-" if minor_units < 0 else ""
    units, cents = divmod(abs(minor_units), 10**digits)
    fraction = f".{cents:0{digits}d}" if digits else ""
    return f"{sign}{units:,}{fraction} {currency.upper()}"


def paid_amount(obj: dict[str, Any]) -> int | None:
    """What a Stripe object (an event's ``data.object``) says was paid, in minor units: the
    first whole number other than 0 of a PaymentIntent's ``amount_received``, a charge's
    ``amount_captured``, a session's ``amount_total``, an invoice's ``amount_paid``; else
    ``amount`` if it is a whole number (a PaymentIntent or charge not captured yet); else 0
    when one of the four says 0 (a session or invoice a coupon or trial made free)."""
    zero = False
    for name in ("amount_received", "amount_captured", "amount_total", "amount_paid"):
        value = obj.get(name)
        if _whole(value) and value:
            return value
        zero = zero or _whole(value)
    fallback = obj.get("amount")
    if _whole(fallback):
        return fallback
    return 0 if zero else None


def _whole(value: object) -> TypeGuard[int]:
    """A JSON whole number (``true`` is an int to Python, not to JSON)."""
    return isinstance(value, int) and not isinstance(value, bool)
