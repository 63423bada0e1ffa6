"""The RQ job: ``fulfil_payment(payment_key)`` performs one payment's downstream action.

The ledger decides everything: the job takes a lease (or records why it skips), fences
the downstream call with its token, calls the action, and records the outcome only if
its token is still current. RQ is just the transport that wakes a worker.
"""

import os
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

from rq import get_current_job

from webhook import settings as settings_module
from webhook.faults import fault
from webhook.redact import redact
from webhook.store import connect
from workers.actions import Action, Call, build_action
from workers.attempts import Attempts, encode_receipt
from workers.exceptions import (
    ActionConfigError,
    AmbiguousDownstreamError,
    PermanentDownstreamError,
    TransientDownstreamError,
)


@dataclass(frozen=True)
class Context:
    attempts: Attempts
    action: Action


@cache
def _context(pid: int) -> Context:
    s = settings_module.load()
    try:
        action = build_action(s.FULFILMENT_ACTION, s.FULFILMENT_TIMEOUT, s.FULFILMENT_REPLAY_SAFE)
    except ActionConfigError as exc:  # RQ logs it, and its message quotes FULFILMENT_ACTION
        raise ActionConfigError(redact(str(exc))) from None
    return Context(Attempts(connect(s), s), action)


def context() -> Context:
    """Settings, Redis and the action, built once per process from the environment."""
    return _context(os.getpid())


def idempotency_key(payment_key: str) -> str:
    """Stable across every attempt for a payment, so a replay-safe downstream dedupes."""
    return f"fulfil:{payment_key}"


def build_call(payment_key: str, token: int, fields: dict[str, str]) -> Call:
    return Call(
        payment_key=payment_key,
        idempotency_key=idempotency_key(payment_key),
        token=token,
        amount=int(fields["amount"]) if fields["amount"].isdigit() else None,
        currency=fields["currency"],
        livemode=fields["livemode"] == "1",
        event_ids=fields["events"].split(),
    )


def run_action(action: Action, call: Call) -> tuple[str, str]:
    """Call the downstream once; map its result to an outcome and a detail string."""
    error: Exception
    try:
        return "fulfilled", encode_receipt(action(call))
    except AmbiguousDownstreamError as exc:
        outcome, error = ("retry" if action.replay_safe else "interrupted"), exc
    except TransientDownstreamError as exc:
        outcome, error = "retry", exc
    except PermanentDownstreamError as exc:
        outcome, error = "failed", exc
    # The one place an error becomes the stored last_error / attempt detail.
    return outcome, redact(str(error))


def fulfil_payment(payment_key: str) -> dict[str, Any]:
    """Fulfil one payment at most once per fencing token; returns what happened."""
    ctx = context()
    job = get_current_job()
    job_id = job.id if job is not None else f"direct-{os.getpid()}"
    start = ctx.attempts.start(payment_key, job_id, ctx.action.replay_safe)
    if start.verdict != "go":
        return {"payment": payment_key, "verdict": start.verdict, "reason": start.reason}
    fault("after_lease")
    fenced = ctx.action.replay_safe or ctx.attempts.mark_calling(payment_key, start.token)
    if not fenced:
        return {"payment": payment_key, "verdict": "stale_before_call", "token": start.token}
    fault("before_action")
    began = time.perf_counter()
    assert start.call_fields is not None  # always set with "go"
    call = build_call(payment_key, start.token, start.call_fields)
    outcome, detail = run_action(ctx.action, call)
    call_ms = (time.perf_counter() - began) * 1000
    fault("after_action")
    verdict, state = ctx.attempts.finish(payment_key, start.token, outcome, detail, call_ms)
    return {"payment": payment_key, "verdict": verdict, "state": state, "token": start.token}
