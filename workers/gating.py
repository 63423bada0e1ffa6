"""A job's side of the shared gate (ledger/gate.py): ask before the call, say after it how
the downstream behaved. Rate refusals are waited out in the job (a slot frees within a
second) up to RATE_WAIT_SECONDS; pause and the open breaker defer the payment in the ledger."""

import time

from ledger import limits
from ledger.gate import Admission, Gate, Health
from workers.deadline import DeadlineExceeded
from workers.exceptions import AmbiguousDownstreamError, TransientDownstreamError


def admit(gate: Gate, payment_key: str, job_id: str) -> Admission:
    """``go`` (call now), ``pass`` (no call will follow) or ``wait`` (deferred)."""
    give_up = time.monotonic() + limits.RATE_WAIT_SECONDS
    while True:
        admission = gate.admit(payment_key, job_id, park_rate=time.monotonic() >= give_up)
        if admission.verdict != "rate":
            return admission
        time.sleep(max(admission.wait_ms, 1) / 1000)


def report(
    gate: Gate, admission: Admission, payment_key: str, token: int, health: Health, detail: str
) -> None:
    """Tell the breaker how the call went, when it matters: a down failure always; a success
    or a call not made only for a probe or while the breaker counts failures (the common
    path, a clean breaker and an answer, costs no round trip)."""
    if health.kind == "down" or admission.probe or (admission.dirty and health.kind == "up"):
        gate.report(payment_key, token, health, detail)


def health_of(error: BaseException | None) -> Health:
    """What a call's error (None: success) says about the downstream as a whole."""
    if isinstance(error, TransientDownstreamError) and error.down:
        return Health("down", error.sent, error.retry_after)
    if isinstance(error, DeadlineExceeded | AmbiguousDownstreamError):
        return Health("none")  # no answer: neither up nor (by itself) down
    return Health("up")
