"""What one HTTP call says about the downstream as a whole (workers/gating.py health_of),
against a real local HTTP server: the circuit breaker counts only "down" answers."""

import pytest

from ledger.gate import Health
from ledger.purchase import purchase_of
from tests.support.downstream_server import CountingDownstream
from tests.support.processes import free_port
from workers.actions import HttpAction
from workers.exceptions import FulfilmentError
from workers.gating import health_of

CALL = purchase_of("pi_1", 1, {"amount": "100", "currency": "usd", "events": "evt_1"})


def health_of_call(url: str) -> Health:
    try:
        HttpAction(url, timeout=2.0, replay_safe=False)(CALL)
    except FulfilmentError as exc:
        return health_of(exc)
    return health_of(None)


@pytest.mark.parametrize(
    ("status", "retry_after", "expected"),
    [
        (200, None, Health("up")),
        (409, None, Health("up")),
        (400, None, Health("up")),  # this payment's refusal: the downstream answers
        (500, None, Health("up")),  # this payment's failure
        (503, None, Health("down")),
        (503, 7, Health("down", retry_after_s=7.0)),
        (429, 30, Health("down", retry_after_s=30.0)),
        (502, None, Health("down")),
        (504, None, Health("down")),
        (301, None, Health("none")),  # not followed: it may have acted, says nothing more
        (303, None, Health("none")),
    ],
)
def test_answers(status: int, retry_after: int | None, expected: Health) -> None:
    with CountingDownstream() as downstream:
        downstream.go_down(status, retry_after)
        assert health_of_call(downstream.url) == expected


def test_a_refused_connection_is_down_and_never_sent() -> None:
    assert health_of_call(f"http://127.0.0.1:{free_port()}/fulfil") == Health("down", sent=False)
