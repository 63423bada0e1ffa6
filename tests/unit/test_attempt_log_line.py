"""The worker's line per attempt that ended: the payment, leg, token, outcome and state,
and for one that did not apply its error's first line, redacted and cut short (a database's
DETAIL lines may quote a row's values; the payment shows the whole error); how long the call
took, or that none was made, and for a retry that the ledger's backoff follows."""

import logging

import pytest

from workers.finishing import LOGGED, said


def logged(
    caplog: pytest.LogCaptureFixture,
    outcome: str,
    detail: str,
    state: str = "interrupted",
    ms: float | None = 12.4,
) -> logging.LogRecord:
    with caplog.at_level(logging.INFO, logger="workers.jobs"):
        said("pi_1", "reverse", 3, outcome, state, outcome, detail, ms)
    [record] = caplog.records
    return record


def test_an_error_is_its_first_line_redacted_and_cut_short(
    caplog: pytest.LogCaptureFixture,
) -> None:
    detail = "duplicate key\nDETAIL: Key (email)=(jenny@example.com) already exists"
    record = logged(caplog, "interrupted", detail)
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "pi_1 reversal token 3: interrupted; call took 12 ms; payment interrupted: duplicate key"
    )
    caplog.clear()
    message = logged(caplog, "retry", "x" * 500 + " https://u:SECRET9@h/p").getMessage()
    assert message.endswith(": " + "x" * LOGGED + "…") and "SECRET9" not in message


def test_an_attempt_that_applied_is_one_info_line_without_its_receipt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    record = logged(caplog, "fulfilled", '{"order": 4711}')
    assert record.levelno == logging.INFO and "4711" not in record.getMessage()


def test_a_retry_says_how_long_the_call_took_and_that_a_backoff_follows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: "token 3: retry after 12 ms", read as a 12 ms backoff; it was the call's
    time, and the backoff (the ledger's) seconds."""
    message = logged(caplog, "retry", "http 503 from http://h:80", "retrying").getMessage()
    assert message == (
        "pi_1 reversal token 3: retry; call took 12 ms; payment retrying (the next attempt"
        " after its backoff): http 503 from http://h:80"
    )


def test_an_attempt_without_a_call_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """Before: "failed after 0 ms", as if a call had been made."""
    record = logged(caplog, "failed", "the action could not be loaded", "failed", None)
    assert record.getMessage().startswith("pi_1 reversal token 3: failed; no call; payment failed")
