"""A payment's attempts as ``webhook-ledger payment`` lists them."""

from typing import Any

from ledger.read.payment_reasons import spent
from ledger.read.payments import Payment
from ledger.read.timeline import LEG_NAMES, Attempt, ended_by_the_ledger, outcome_words


def ended(attempts: list[Attempt]) -> str:
    n = ended_by_the_ledger(attempts)
    return f" ({n} ended by the ledger)" if n else ""


def rows(p: Payment) -> list[dict[str, Any]]:
    """The payment's attempts as the table lists them."""
    return [
        {
            "token": a.token,
            "of": LEG_NAMES[a.leg],
            "outcome": _outcome(a, spent(p, a)),
            "started": a.started_at,
            "took (ms)": a.duration_ms,
            "call (ms)": round(a.call_ms, 1) if a.call_ms is not None else None,
            "error": a.error,
        }
        for a in p.attempts
    ]


def _outcome(a: Attempt, spent: bool) -> str:
    outcome = outcome_words(a.leg, a.outcome, spent)
    if a.phase_at_expiry:
        outcome += f" (while {a.phase_at_expiry})"
    if a.late:
        outcome += " (late receipt)"
    if a.stale_outcome:
        outcome += f" (its worker later said {a.stale_outcome})"
    if a.caller:
        outcome += f" (called by {a.caller})"
    return outcome
