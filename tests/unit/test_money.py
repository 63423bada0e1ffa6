"""Amounts by Stripe's currency exponents, as the API, the CLI and the dashboard show them."""

import pytest

from ledger import money
from ledger.read.payments import Amount, amount


@pytest.mark.parametrize(
    ("minor_units", "currency", "shown"),
    [
        (2000, "usd", "20.00 USD"),
        (5, "eur", "0.05 EUR"),
        (123456789, "gbp", "1,234,567.89 GBP"),
        (2000, "jpy", "2,000 JPY"),  # zero-decimal
        (2000, "KRW", "2,000 KRW"),
        (1234, "kwd", "1.234 KWD"),  # three-decimal
        (10000, "isk", "100.00 ISK"),  # zero-decimal in ISO 4217, two decimals in Stripe's API
        (-150, "usd", "-1.50 USD"),  # a refund
        (0, "usd", "0.00 USD"),
    ],
)
def test_formatted_by_the_currency_s_exponent(minor_units: int, currency: str, shown: str) -> None:
    assert money.format_minor(minor_units, currency) == shown


def test_the_typed_amount_from_what_is_stored() -> None:
    assert amount("2000", "jpy") == Amount(
        minor_units=2000, currency="jpy", exponent=0, formatted="2,000 JPY"
    )
    assert amount(b"-150", "USD") == Amount(
        minor_units=-150, currency="usd", exponent=2, formatted="-1.50 USD"
    )


@pytest.mark.parametrize(
    ("minor_units", "currency"),
    [("", "usd"), ("2000", ""), ("20.00", "usd"), ("²", "usd"), ("2000", "us d"), ("1e3", "usd")],
)
def test_no_amount_from_what_is_not_one(minor_units: str, currency: str) -> None:
    assert amount(minor_units, currency) is None
