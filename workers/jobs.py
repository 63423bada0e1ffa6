"""The RQ job: ``fulfil_payment(payment_key)`` performs one payment's downstream action.

The ledger decides everything: the job asks the shared gate (pause, the circuit breaker of
the downstream it calls, rate limit: workers/gating.py), takes a lease (or records why it
skips), fences the downstream call with its token, calls the action, tells that breaker how
the downstream behaved, and records the outcome only if its token is still current. RQ is
just the transport that wakes a worker.
"""

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from redis.exceptions import RedisError
from rq import get_current_job

from ledger import settings as settings_module
from ledger.attempts import Attempts, encode_receipt
from ledger.breakers import breaker_of
from ledger.connection import connect
from ledger.faults import fault
from ledger.gate import Gate, Health
from ledger.purchase import Purchase, purchase_of, stored_fields
from ledger.purchase_reads import PurchaseReads
from ledger.read.reversal import leg_of
from ledger.read.timeline import LEG_NAMES
from ledger.redact import redact
from ledger.replication import NotReplicated
from ledger.replies import Start
from ledger.reversals import refulfil_of, reversal_of
from workers.actions import (
    Action,
    Receipt,
    build_action,
    build_reversal_action,
    downstream_of,
    settler,
)
from workers.api import DownstreamDown
from workers.deadline import DeadlineExceeded, call_within, calling_thread
from workers.exceptions import (
    AmbiguousDownstreamError,
    FulfilmentError,
    PermanentDownstreamError,
    TransientDownstreamError,
)
from workers.finishing import (
    failed_without_call,
    finish_while_leased,
    not_called,
    said,
    unconfirmed,
)
from workers.gating import admit, health_of, rate_wait_until, report, start_by
from workers.reversal_target import applied_on, refusal

log = logging.getLogger("workers.jobs")


@dataclass(frozen=True)
class Context:
    attempts: Attempts
    gate: Gate
    action: Action | None
    action_error: str
    """Why the action could not be built ('' when it could): recorded on each payment."""
    timeout: float
    kill_after: float
    """Seconds past ``timeout`` at which a call that has not stopped ends with this process."""
    call_window: float
    """Seconds after its fence was sent that a call may still start (Settings.call_window)."""
    attempt_s: float
    """Seconds a job needs from its admission to its end (Settings.attempt_s)."""
    reads: PurchaseReads | None
    """Reads what a purchase still needs from Stripe (CHECKOUT_LINE_ITEMS, INVOICE_LINES,
    CHECKOUT_WAIT_SECONDS), else None."""
    reversal: Action | None = None
    """REVERSAL_ACTION's action (None: unset, or it could not be built: ``action_error``)."""
    downstream: str = ""
    """The fulfilment action's name for its downstream (workers.actions.downstream_of: a
    path resolved, a URL parsed and hashed), made once rather than for every job."""
    reversal_apart: bool = False
    """REVERSAL_ACTION calls another downstream: its calls have their own circuit breaker
    (ledger/breakers.py)."""


@cache
def _context(pid: int, thread: str) -> Context:
    s = settings_module.load()
    reversal: Action | None = None
    try:
        action: Action | None = build_action(s)
        reversal = build_reversal_action(s)
        error = ""
    except FulfilmentError as exc:
        action, error = None, redact(str(exc))  # quotes FULFILMENT_ACTION or REVERSAL_ACTION
    redis = connect(s)
    downstream = downstream_of(action) if action is not None else ""
    apart = reversal is not None and downstream_of(reversal) != downstream
    return Context(
        Attempts(redis, s),
        Gate(redis, s),
        action,
        error,
        s.FULFILMENT_TIMEOUT,
        s.FULFILMENT_KILL_MARGIN_SECONDS,
        s.call_window,
        s.attempt_s,
        PurchaseReads(redis, s) if PurchaseReads.wanted(s) else None,
        reversal,
        downstream,
        apart,
    )


def context() -> Context:
    """Settings, Redis and the action, built once per process and slot (its thread's name:
    workers.deadline.calling_thread) from the environment: each of a worker's calls in
    flight (workers/inflight.py) has its own client, action (an HTTP session, a database
    connection) and liveness key."""
    return _context(*calling_thread())


def build_call(payment_key: str, start: Start, stored: dict[str, str]) -> Purchase:
    """The purchase this attempt passes to the action: the payment hash's purchase fields,
    with the paid fields as the lease read them."""
    paid = {"amount": start.amount, "currency": start.currency, "livemode": start.livemode}
    return purchase_of(payment_key, start.token, {**stored, **paid, "events": start.events})


def run_action(
    action: Action,
    call: Purchase,
    timeout: float,
    kill_after: float,
    settle: Callable[[Purchase], Receipt] | None = None,
) -> tuple[str, str, Health, bool]:
    """Call the downstream once, within ``timeout`` seconds in all (the process ends
    ``kill_after`` seconds later if the call will not stop); map its result to an outcome,
    a detail string, what it says about the downstream as a whole and whether its answer
    refused it (:func:`refused_by`). With ``settle`` (the action's, for a settlement) that is
    called instead: ``voided`` when it voided the key."""
    try:
        abort = getattr(action, "abort", None)
        receipt = call_within(timeout, lambda: (settle or action)(call), kill_after, abort)
    except DeadlineExceeded as exc:
        return outcome_of(exc, action.replay_safe), f"deadline: {exc}", health_of(exc), False
    except (TransientDownstreamError, PermanentDownstreamError) as exc:
        # The one place an error becomes the stored last_error / attempt detail.
        outcome = outcome_of(exc, action.replay_safe)
        return outcome, redact(str(exc)), health_of(exc), refused_by(exc)
    except (SystemExit, KeyboardInterrupt) as exc:
        # The user's code (a module:function, FULFILMENT_EFFECT) exiting: unknown how far it
        # got, as any error it raises. Let through, it would end a one-slot worker's loop
        # with exit code 0, as a clean stop, and the payment would wait out its lease.
        # (RQ's second stop signal landing in the call ends it the same way; the worker
        # stops after, as asked.)
        error = AmbiguousDownstreamError(f"the call ended with {exc!r}")
        return outcome_of(error, action.replay_safe), redact(str(error)), health_of(error), False
    if settle is not None and receipt.get("outcome") == "voided":
        return "voided", encode_receipt(receipt), health_of(None), False
    return "fulfilled", encode_receipt(receipt), health_of(None), False


def outcome_of(error: BaseException, replay_safe: bool) -> str:
    """How an attempt ends on a call's error: a call that may have been applied (no answer
    came back) runs again only when the action is replay-safe, else waits for a person."""
    if may_have_applied(error):
        return "retry" if replay_safe else "interrupted"
    if isinstance(error, TransientDownstreamError):
        return "retry"
    return "failed"


def may_have_applied(error: BaseException) -> bool:
    """Whether a call that ended in ``error`` may have applied: no answer, or one that does
    not say (a deadline, a reset, a 500, 502, 504, an unexpected exception, a DownstreamDown
    whose request left: ``sent``, its default)."""
    if isinstance(error, DownstreamDown):
        return error.sent
    return isinstance(error, DeadlineExceeded | AmbiguousDownstreamError)


def refused_by(error: BaseException) -> bool:
    """Whether a call's error is its refusal, which applied nothing (a 4xx, 409, 429, 503,
    a connection refused; GiveUp, RetryLater, DownstreamDown with sent=False): what an
    action that is not replay-safe is called again after, or fails on."""
    refusal = isinstance(error, TransientDownstreamError | PermanentDownstreamError)
    return refusal and not may_have_applied(error)


def fulfil_payment(payment_key: str) -> dict[str, Any]:
    """The RQ job (run by RQ's own workers): :func:`fulfil` under the current job's id."""
    entered = time.monotonic()  # RQ's timer for the job started just before
    job = get_current_job()
    job_id = job.id if job is not None else f"direct-{os.getpid()}"
    return fulfil(payment_key, job_id, job.timeout if job is not None else None, entered)


def fulfil(
    payment_key: str, job_id: str, job_timeout: float | None, entered: float
) -> dict[str, Any]:
    """Fulfil one payment at most once per fencing token; returns what happened. The job
    ``job_id`` started at ``entered`` (time.monotonic()) with RQ timeout ``job_timeout``."""
    ctx = context()
    stored = stored_fields(ctx.attempts.redis, payment_key)  # before the lease and its window
    leg = leg_of(stored)
    if ctx.action is None:
        detail = f"the fulfilment action could not be loaded: {ctx.action_error}"
        return failed_without_call(ctx.attempts, payment_key, job_id, detail, leg)
    action = ctx.reversal if leg == "reverse" else ctx.action
    if action is None:  # REVERSAL_ACTION unset since the reversal became due
        detail = "a reversal is due and REVERSAL_ACTION is not set"
        return failed_without_call(ctx.attempts, payment_key, job_id, detail, leg)
    downstream = ctx.downstream if action is ctx.action else downstream_of(action)
    settle = settler(action)
    if leg == "settle" and settle is None:  # FULFILMENT_ACTION changed since
        detail = "settlement: the fulfilment action cannot settle a payment (not built-in)"
        return failed_without_call(ctx.attempts, payment_key, job_id, detail, leg)
    if leg == "settle" and stored.get("called_on", downstream) != downstream:
        detail = (  # FULFILMENT_ACTION moved since: the effect may be on the other one
            f"settlement: its calls went to {stored['called_on']}, this worker's action is"
            f" {downstream}: check that downstream"
        )
        return failed_without_call(ctx.attempts, payment_key, job_id, detail, leg)
    if leg == "reverse":  # FULFILMENT_ACTION moved since the effect: not where it went
        moved = refusal(applied_on(ctx.attempts.redis, payment_key), ctx.downstream, downstream)
        if moved:
            return failed_without_call(ctx.attempts, payment_key, job_id, moved, leg, "held")
    reads = ctx.reads if leg == "fulfil" else None  # a settlement needs no purchase read
    ready = reads.prepare(payment_key, stored) if reads else None  # before the gate
    if ready and ready.verdict == "wait":  # Stripe's, not the downstream's: no breaker
        return {"payment": payment_key, "verdict": "wait", "reason": ready.reason}
    if ready and ready.verdict == "refused":
        detail = f"purchase not read from Stripe's API: {ready.detail}"
        return failed_without_call(ctx.attempts, payment_key, job_id, detail)
    give_up = rate_wait_until(entered, job_timeout, ctx.attempt_s)
    latest = start_by(entered, job_timeout, ctx.attempt_s)  # Stripe's reads counted
    breaker = breaker_of(leg, ctx.reversal_apart)
    admission = admit(ctx.gate, payment_key, job_id, give_up, latest, breaker)  # unleased
    if admission.verdict != "go":
        return {"payment": payment_key, "verdict": admission.verdict, "reason": admission.reason}
    # The lease a call runs under starts in Redis after this moment: the call window is
    # counted from here (a replay-safe attempt is fenced by its start).
    fenced_at = time.monotonic()
    start = ctx.attempts.start(
        payment_key,
        job_id,
        action.replay_safe,
        leg=leg,
        settles=settle is not None,
        downstream=downstream,
    )
    if start.verdict != "go":
        report(ctx.gate, admission, payment_key, start.token, Health("none"), "", breaker)
        return {"payment": payment_key, "verdict": start.verdict, "reason": start.reason}
    fault("after_lease")
    # The reversal this lease holds (the one read before may be done): read before the
    # fence, so a Redis error here cannot leave a call that was never made `interrupted`.
    # Nothing changes it while the lease is held (only its finish ends it).
    if leg == "reverse":
        stored = stored_fields(ctx.attempts.redis, payment_key)
    until = fenced_at + ctx.attempts.settings.LEASE_SECONDS - ctx.kill_after  # lease's end
    try:
        if not action.replay_safe:
            fenced_at = time.monotonic()
        fenced = action.replay_safe or ctx.attempts.mark_calling(payment_key, start.token)
    except NotReplicated as exc:
        return unconfirmed(ctx.attempts, payment_key, start.token, exc, (leg, until))
    if not fenced:
        report(ctx.gate, admission, payment_key, start.token, Health("none"), "", breaker)
        return {"payment": payment_key, "verdict": "stale_before_call", "token": start.token}
    fault("before_action")
    if time.monotonic() - fenced_at > ctx.call_window:
        stalled_s = time.monotonic() - fenced_at
        return not_called(ctx.attempts, payment_key, start.token, stalled_s, (leg, until))
    began = time.perf_counter()
    call = build_call(payment_key, start, stored)
    if leg in ("reverse", "refulfil"):  # or a fulfilment again after a dispute won: own key
        call = reversal_of(call, stored) if leg == "reverse" else refulfil_of(call, stored)
    settling = settle if leg == "settle" else None
    ran = run_action(action, call, ctx.timeout, ctx.kill_after, settling)
    outcome, detail, health, refused = ran
    if leg in ("reverse", "settle") and outcome != "fulfilled":
        detail = f"{LEG_NAMES[leg]}: {detail}"  # which call failed, wherever its error is shown
    call_ms = (time.perf_counter() - began) * 1000
    fault("after_action")
    try:  # before finish, never instead of it: a lost report only leaves the breaker less told
        report(ctx.gate, admission, payment_key, start.token, health, detail, breaker)
    except RedisError as exc:
        log.warning(
            "%s token %s: breaker not told (%s)", payment_key, start.token, redact(str(exc))
        )
    ended = (outcome, detail, call_ms, refused)
    verdict, state = finish_while_leased(ctx.attempts, payment_key, start.token, ended, until)
    said(payment_key, leg, start.token, verdict, state, outcome, detail, call_ms)
    return {"payment": payment_key, "verdict": verdict, "state": state, "token": start.token}
