"""A person's decision on a payment, the one place it is decided for the ops API, the
dashboard and ``webhook-ledger``: retry a failed (or held) payment, or resolve an
interrupted (or held) one as fulfilled or to run again; on one payment, or on every payment
in a state that entered it within a time and whose last error contains a text.

Each payment is decided by one atomic script (``Attempts.record_decision``), which acts only
on a payment still in a state the action is for: two bulk runs at once re-queue each payment
once. The answer is a typed view: the new state, or a Problem saying why not."""

from redis import Redis

from ledger import keys
from ledger.attempts import Attempts
from ledger.clock import duration_s, now_ms
from ledger.read.base import Problem
from ledger.read.decisions import BulkDecision, Decision
from ledger.stored import ms_time, text

DECISIONS = {"retry": ("retry",), "resolve": ("fulfilled", "retry", "not_applied")}
"""What each action may decide: ``retry`` runs it again, ``fulfilled`` says the effect happened,
``not_applied`` says it did not (a payment held after it was taken back: it then ends
``refunded_unfulfilled``, no reversal)."""

STATES = {"retry": ("failed", "held"), "resolve": ("interrupted", "held")}
"""The states each action is for (a bulk run takes the first unless told)."""

MAX_BULK = 100_000
"""Most payments one bulk run looks at (newest first)."""


class BadFilter(ValueError):
    """A filter a bulk run cannot use (an unknown state, a malformed duration)."""


def decide(
    attempts: Attempts, payment_key: str, action: str, decision: str, who: str
) -> Decision | Problem:
    """Apply ``decision`` (``action`` retry or resolve); refused unless the payment is in a
    state the action is for and no call of it may still be running."""
    decisions, states = DECISIONS[action], STATES[action]
    if decision not in decisions:
        return Problem(
            error="unknown_decision",
            message=f"{action} takes {' or '.join(decisions)}, not {decision or 'nothing'}",
            allowed=list(decisions),
        )
    verdict, state = attempts.record_decision(payment_key, decision, states, who)
    if verdict == "ok":
        return Decision(payment_key=payment_key, state=state)  # type: ignore[arg-type]
    if verdict == "wait":
        return Problem(
            error="attempt_may_still_be_running",
            message="the worker process of its last call may still be in that call (its "
            "watchdog ends it by retry_after at the latest); nothing was changed: try again "
            "once it has ended",
            retry_after=ms_time(state),
        )
    if not state:
        return Problem(error="not_found", message=f"no payment {payment_key}")
    if verdict == "by_hand":
        return Problem(
            error="grant_by_hand",
            message="Only a person decides this payment: Stripe gave it back after the "
            "ledger took it back, or took it back again after it was granted again. Nothing "
            "of the ledger's runs for it again. Do by hand what its hold reason says (grant "
            "it, or take it back), then resolve it as fulfilled; or refund it again and "
            "resolve nothing. Nothing was changed.",
            state=state,
        )
    if verdict == "not_taken_back":
        return Problem(
            error="not_taken_back",
            message="Not applied is a person's word on a payment held after it was taken "
            "back (refunded in full, a dispute lost) while a call may have applied it; this "
            f"one is {state} and not held so. Nothing was changed.",
            state=state,
        )
    return Problem(
        error="refused",
        message=f"the payment is {state}; {action} applies only to {' or '.join(states)} "
        "payments. Nothing was changed.",
        allowed=list(states),
        state=state,
    )


def decide_bulk(
    attempts: Attempts, action: str, state: str, since: str, error: str, dry_run: bool, who: str
) -> BulkDecision:
    """Re-queue (``retry`` failed, ``resolve`` interrupted as not applied) every matching
    payment; ``dry_run``: only count and list them. BadFilter when a filter is wrong."""
    if state not in STATES.get(action, ()):
        raise BadFilter(f"{action} applies to {' or '.join(STATES[action])} payments")
    selected = matching(attempts.redis, state, since, error)
    found = not_by_hand(attempts.redis, selected) if state == "held" else selected
    requeued: list[str] = []
    still_running = 0
    if not dry_run:
        for pk in found:
            answer = decide(attempts, pk, action, "retry", who)
            if isinstance(answer, Decision):
                requeued.append(pk)
            elif answer.error == "attempt_may_still_be_running":
                still_running += 1
    return BulkDecision(
        action=action,
        state=state,
        since=since or None,
        error=error or None,
        dry_run=dry_run,
        matched=len(found),
        requeued=len(requeued),
        still_running=still_running,
        by_hand=len(selected) - len(found),
        payment_keys=(found if dry_run else requeued)[:100],
    )


def matching(redis: Redis, state: str, since: str, error: str) -> list[str]:
    """The payments in ``state`` (that entered it within ``since``; whose last error holds
    ``error``, case-insensitive), newest first."""
    oldest = now_ms(redis) - since_s(since) * 1000 if since else "-inf"
    found = redis.zrevrangebyscore(keys.state_index(state), "+inf", oldest, 0, MAX_BULK)
    payment_keys = [text(k) for k in found]
    if not error:
        return payment_keys
    with redis.pipeline(transaction=False) as pipe:
        for pk in payment_keys:
            pipe.hget(keys.payment(pk), "last_error")
        errors = pipe.execute()
    wanted = error.lower()
    return [
        pk for pk, e in zip(payment_keys, errors, strict=True) if e and wanted in text(e).lower()
    ]


def not_by_hand(redis: Redis, payment_keys: list[str]) -> list[str]:
    """Those not held for a person to act by hand (``by_hand``): no retry runs one, so a bulk
    run neither lists nor counts it."""
    with redis.pipeline(transaction=False) as pipe:
        for pk in payment_keys:
            pipe.hget(keys.payment(pk), "by_hand")
        marks = pipe.execute()
    return [pk for pk, mark in zip(payment_keys, marks, strict=True) if not mark]


def since_s(given: str) -> int:
    """The ``since`` filter in seconds; BadFilter when it is not a duration."""
    try:
        return duration_s(given)
    except ValueError as exc:
        raise BadFilter(f"since: {exc}") from None
