"""How the HTTP action reads a downstream's ``Retry-After`` (RFC 9110: delay-seconds or an
HTTP date), which the circuit breaker honours."""

import email.utils
import time

import pytest

from workers.http_action import retry_after


@pytest.mark.parametrize(("header", "seconds"), [("120", 120.0), (" 5 ", 5.0), ("0", 0.0)])
def test_delay_seconds(header: str, seconds: float) -> None:
    assert retry_after(header) == seconds


def test_an_http_date_in_the_future() -> None:
    header = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55 <= retry_after(header) <= 60


@pytest.mark.parametrize(
    "header", ["", "soon", "-5", "1.5", "²", "١٢", "Wed, 21 Oct 2015 07:28:00 GMT"]
)
def test_anything_else_or_a_past_date_asks_for_no_wait(header: str) -> None:
    assert retry_after(header) == 0.0
