"""A job's side of the shared gate (ledger/gate.py): ask before the call, say after it how
the downstream behaved. Rate refusals are waited out in the job (a slot frees within a
second) up to RATE_WAIT_SECONDS, and never past what the job's own RQ timeout leaves for its
attempt; then, as on a pause or the open breaker, the payment is deferred in the ledger. A job
whose RQ timeout no longer leaves its attempt's time is not admitted: its payment is due again
at once, for a fresh job."""

import math
import time

from ledger import limits
from ledger.gate import Admission, Gate, Health
from ledger.keys import FULFILMENT_BREAKER, Breaker
from workers.deadline import DeadlineExceeded
from workers.exceptions import AmbiguousDownstreamError, TransientDownstreamError


def admit(
    gate: Gate,
    payment_key: str,
    job_id: str,
    give_up: float,
    latest_start: float = math.inf,
    breaker: Breaker = FULFILMENT_BREAKER,
) -> Admission:
    """``go`` (start the attempt now), ``pass`` (no call will follow) or ``wait``
    (deferred), by ``breaker`` (the called downstream's); rate refusals are waited out until
    ``give_up`` (time.monotonic()), then deferred. Past ``latest_start`` (:func:`start_by`)
    the payment is deferred instead of admitted: due again at once, for a fresh job."""
    while True:
        now = time.monotonic()
        late = now > latest_start
        park = now >= give_up
        admission = gate.admit(payment_key, job_id, park, late, breaker)
        if admission.verdict == "go" and time.monotonic() > latest_start:
            # Its own round trip took the job past it: a probe granted is given back.
            report(gate, admission, payment_key, 0, Health("none"), "", breaker)
            continue
        if admission.verdict != "rate":
            return admission
        time.sleep(min(max(admission.wait_ms, 1) / 1000, max(give_up - now, 0.0)))


def start_by(entered: float, job_timeout: float | None, attempt_s: float) -> float:
    """The latest time.monotonic() a job that ``entered`` then, with RQ timeout
    ``job_timeout`` (None or 0: none), may start its attempt: ``attempt_s``
    (Settings.attempt_s) before RQ would end it. RQ ends a job at its timeout wherever it
    is: past the call, before its outcome is written, a call that applied would be left to
    its lease's expiry (``interrupted`` when not replay-safe). A job enqueued with an older,
    shorter timeout, or one held in Stripe's API reads, defers instead."""
    if job_timeout is None or job_timeout <= 0:
        return math.inf
    return entered + job_timeout - attempt_s


def rate_wait_until(entered: float, job_timeout: float | None, attempt_s: float) -> float:
    """When a job that ``entered`` (time.monotonic()) stops waiting for a rate slot: after
    RATE_WAIT_SECONDS, or at :func:`start_by`, whichever comes first: a wait past it would
    end the job with no call and count against the payment."""
    return min(entered + limits.RATE_WAIT_SECONDS, start_by(entered, job_timeout, attempt_s))


def report(
    gate: Gate,
    admission: Admission,
    payment_key: str,
    token: int,
    health: Health,
    detail: str,
    breaker: Breaker = FULFILMENT_BREAKER,
) -> None:
    """Tell ``breaker`` (the one that admitted the call) how the call went, when it matters:
    a down failure always; a success or a call not made only for a probe or while the
    breaker counts failures (the common path, a clean breaker and an answer, costs no round
    trip)."""
    if health.kind == "down" or admission.probe or (admission.dirty and health.kind == "up"):
        gate.report(payment_key, token, health, detail, breaker)


def health_of(error: BaseException | None) -> Health:
    """What a call's error (None: success) says about the downstream as a whole."""
    if isinstance(error, TransientDownstreamError) and error.down:
        return Health("down", error.sent, error.retry_after)
    if isinstance(error, AmbiguousDownstreamError) and error.answered:
        return Health("up")  # it answered (a 500): this payment's failure, not an outage
    if isinstance(error, DeadlineExceeded | AmbiguousDownstreamError):
        return Health("none")  # no answer: neither up nor (by itself) down
    return Health("up")
