"""The worker's line per attempt that ended: the payment, leg, token, outcome and state,
and for one that did not apply its error's first line, redacted and cut short (a database's
DETAIL lines may quote a row's values; the payment shows the whole error)."""

import logging

import pytest

from workers.finishing import LOGGED, said


def logged(caplog: pytest.LogCaptureFixture, outcome: str, detail: str) -> logging.LogRecord:
    with caplog.at_level(logging.INFO, logger="workers.jobs"):
        said("pi_1", "reverse", 3, outcome, "interrupted", outcome, detail, 12.4)
    [record] = caplog.records
    return record


def test_an_error_is_its_first_line_redacted_and_cut_short(
    caplog: pytest.LogCaptureFixture,
) -> None:
    detail = "duplicate key\nDETAIL: Key (email)=(jenny@example.com) already exists"
    record = logged(caplog, "interrupted", detail)
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "pi_1 reversal token 3: interrupted after 12 ms, payment interrupted: duplicate key"
    )
    caplog.clear()
    message = logged(caplog, "retry", "x" * 500 + " https://u:SECRET9@h/p").getMessage()
    assert message.endswith(": " + "x" * LOGGED + "…") and "SECRET9" not in message


def test_an_attempt_that_applied_is_one_info_line_without_its_receipt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    record = logged(caplog, "fulfilled", '{"order": 4711}')
    assert record.levelno == logging.INFO and "4711" not in record.getMessage()
