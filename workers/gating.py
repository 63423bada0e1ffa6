"""A job's side of the shared gate (ledger/gate.py): ask before the call, say after it how
the downstream behaved. Rate refusals are waited out in the job (a slot frees within a
second) up to RATE_WAIT_SECONDS, and never past what the job's own RQ timeout leaves for its
attempt; then, as on a pause or the open breaker, the payment is deferred in the ledger."""

import time

from ledger import limits
from ledger.gate import Admission, Gate, Health
from workers.deadline import DeadlineExceeded
from workers.exceptions import AmbiguousDownstreamError, TransientDownstreamError


def admit(gate: Gate, payment_key: str, job_id: str, give_up: float) -> Admission:
    """``go`` (call now), ``pass`` (no call will follow) or ``wait`` (deferred); rate
    refusals are waited out until ``give_up`` (time.monotonic()), then deferred."""
    while True:
        now = time.monotonic()
        admission = gate.admit(payment_key, job_id, park_rate=now >= give_up)
        if admission.verdict != "rate":
            return admission
        time.sleep(min(max(admission.wait_ms, 1) / 1000, max(give_up - now, 0.0)))


def rate_wait_until(entered: float, job_timeout: float | None, attempt_s: float) -> float:
    """When a job that ``entered`` (time.monotonic()) stops waiting for a rate slot: after
    RATE_WAIT_SECONDS, or sooner if its RQ timeout (None: none) would then leave less than
    ``attempt_s`` for its attempt (Settings.attempt_s). RQ kills a job at its timeout
    wherever it is, so a wait past it would end the job with no call and count against
    the payment (a job enqueued with an older, shorter timeout defers at once)."""
    until = entered + limits.RATE_WAIT_SECONDS
    if job_timeout is not None and job_timeout > 0:
        until = min(until, entered + job_timeout - attempt_s)
    return until


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
