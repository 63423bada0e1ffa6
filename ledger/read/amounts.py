"""An amount as Stripe sends it (integer minor units and a currency) and as people read it."""

from ledger import money
from ledger.read.base import View
from ledger.stored import text


class Amount(View):
    minor_units: int
    currency: str
    exponent: int
    formatted: str


def amount(minor_units: object, currency: object) -> Amount | None:
    """The typed amount from the stored strings; None when either is missing or unreadable."""
    digits_text, code = text(minor_units or ""), text(currency or "")
    digits = digits_text.removeprefix("-")
    if not (digits.isascii() and digits.isdigit() and code.isascii() and code.isalpha()):
        return None
    value = int(digits_text)
    return Amount(
        minor_units=value,
        currency=code.lower(),
        exponent=money.exponent(code),
        formatted=money.format_minor(value, code),
    )
