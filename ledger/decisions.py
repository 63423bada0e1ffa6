"""A person's decision on a payment (retry, or resolve as fulfilled or to run again), as the
ops API, the dashboard and ``webhook-ledger`` answer it: the new state, or why not."""

from ledger.attempts import DECISIONS, Attempts
from ledger.stored import ms_time
from ledger.views import Decision, Problem


def decide(
    attempts: Attempts, payment_key: str, action: str, decision: str, who: str
) -> Decision | Problem:
    """Apply ``decision`` (``action`` retry or resolve); refused unless the payment is in a
    state the action is for and no call of it may still be running."""
    decisions, allowed = DECISIONS[action]
    if decision not in decisions:
        return Problem(
            error="unknown_decision",
            message=f"{action} takes {' or '.join(decisions)}, not {decision or 'nothing'}",
            allowed=list(decisions),
        )
    verdict, state = attempts.decide(payment_key, decision, allowed, who)
    if verdict == "ok":
        return Decision(payment_key=payment_key, state=state)  # type: ignore[arg-type]
    if verdict == "wait":
        until = ms_time(state)
        return Problem(
            error="attempt_may_still_be_running",
            message="the worker process of its last call may still be in that call (its "
            "watchdog ends it by retry_after at the latest); nothing was changed: try again "
            "once it has ended",
            retry_after=until,
        )
    if not state:
        return Problem(error="not_found", message=f"no payment {payment_key}")
    return Problem(
        error="refused",
        message=f"the payment is {state}; {action} applies only to {' or '.join(allowed)} "
        "payments. Nothing was changed.",
        allowed=list(allowed),
        state=state,
    )
