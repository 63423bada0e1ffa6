"""Refunds, disputes and reversals for people (docs/REVERSAL.md): the counts beside the
payments by state (``summary``), and one payment's refunds with their amounts, its dispute,
why it was taken back and what its reversal did (``payment``)."""

from typing import Any

from rich.table import Table

from ledger.read.base import to_json
from ledger.read.payments import Payment
from ledger.read.reversal import PaymentReversal, Refund
from ledger.read.stats import Summary
from ledger.read.timeline import LEG_NAMES
from ledgerctl.terminal import iso, kv_table
from workers.effects import ROWCOUNT

WAITING = {
    "failed": "reversals failed: a person's job",
    "interrupted": "reversals interrupted: a person's job",
    "held": "held after a dispute won after the reversal: a person's job",
}
"""The reversals waiting for a person, by state."""
VOIDED = "its settlement found no effect and voided its key (none can apply)"
"""Why a payment its settlement voided needs no reversal (docs/REVERSAL.md)."""
CALLED_IN_VAIN = (
    "taken back before any effect (its calls applied nothing: refused, or a person found so)"
)
"""Why one refunded in full after calls that applied nothing needs none."""
LEG_SUFFIX = {leg: f" ({name})" if leg != "fulfil" else "" for leg, name in LEG_NAMES.items()}


def counts(s: Summary) -> Table:
    r, waits = s.reversals, s.needs_a_person.reverse
    rows: dict[str, Any] = {
        "reversals due": r.due,
        "reversed by the reversal action": r.reversed,
        "of them, one refund's (REVERSAL_PER_REFUND)": r.refund_reversals,
        "reversed, a person's word": r.resolved_reversed,
        "refunded before any fulfilment (never called, or voided)": r.refunded_unfulfilled,
        "given back after (a dispute won, a refund failed)": r.reinstated,
        "fulfilments again due (REVERSAL_DISPUTE_WON=fulfil)": r.refulfils_due,
        "fulfilled again": r.refulfilled,
        "settlements due (an answer lost, then taken back)": r.settles_due,
        "settled: no effect, key voided": r.settled_voided,
        "settled: the effect found": r.settled_applied,
    }
    rows |= {WAITING.get(state, f"reversals {state}"): n for state, n in waits.items() if n}
    return kv_table("Refunds and disputes", rows)


def _taken_back(p: Payment) -> str:
    r = p.reversal
    if r is not None and r.taken_back == "refund" and _refund_failed_since(p):
        assert r.refunded is not None and p.amount is not None  # _refund_failed_since's
        now = f"{r.refunded.formatted} of {p.amount.formatted}"
        return f"refunded in full, then a refund failed: refunded {now} now"
    if r is not None and r.taken_back is not None:
        return "refunded in full" if r.taken_back == "refund" else "dispute lost"
    if r is None or r.refunded is None or r.refunded.minor_units <= 0:
        return "no (nothing to take back)"
    paid = f" of {p.amount.formatted}" if p.amount else ""
    # REVERSAL_PER_REFUND: each refund reversed on its own, the payment not taken back
    stays = (
        "its refunds reversed on their own" if r.reversed_amount or r.due else "the effect stays"
    )
    return f"no: refunded {r.refunded.formatted}{paid}, {stays}"


def _refund_failed_since(p: Payment) -> bool:
    """Taken back as refunded in full, and a refund failed since: less is refunded now."""
    r = p.reversal
    return bool(r and r.refunded and p.amount and r.refunded.minor_units < p.amount.minor_units)


def _reversal(p: Payment) -> str | None:
    r = p.reversal
    if r is None:
        return None
    if r.due:
        tries = f"{r.attempts_started} attempt(s) after token {r.after_token}"
        key = f"key {r.idempotency_key}" if r.idempotency_key else "each refund under its own key"
        return f"due at {iso(r.due_at)} ({r.why}), {key}, {tries}"
    if p.state == "refunded_unfulfilled" and any(a.outcome == "voided" for a in p.attempts):
        return f"none needed: {VOIDED}"
    if p.state == "refunded_unfulfilled" and p.attempts_started:
        return f"none needed: {CALLED_IN_VAIN}"
    if p.state == "refunded_unfulfilled":
        return "none needed: taken back before any effect, never called"
    if r.taken_back and p.state == "fulfilled":
        return "none: REVERSAL_ACTION is not set, the effect stays"
    if r.taken_back:
        return f"not due yet: {p.state} decides first"
    return None


def _reinstated(p: Payment, r: PaymentReversal) -> str | None:
    if r.reinstated_at is None:
        return None
    then = "fulfilled again" if r.refulfil else "held for a person" if p.by_hand else p.state
    return f"{iso(r.reinstated_at)}: {then}"


def _retake(r: PaymentReversal) -> str | None:
    if r.taken_back_again is None:
        return None
    what = "refunded in full" if r.taken_back_again == "refund" else "a dispute lost"
    return f"{what} after it was granted again: held for a person to take it back by hand"


def _refulfil(p: Payment) -> str | None:
    g = p.reversal.refulfil if p.reversal else None
    if g is None:
        return None
    tries = f"key {g.idempotency_key}, {g.attempts_started} attempt(s) after token {g.after_token}"
    done = f"done {iso(g.refulfilled_at)}" if g.refulfilled_at else f"not yet ({p.state})"
    return f"{tries}: {done}"


def _refund_amount(f: Refund) -> str:
    if f.amount:
        return f.amount.formatted
    if f.counted:
        return f"{f.minor_units} minor units (currency not known)"
    return "failed or canceled"


def taken_back(p: Payment) -> list[Table]:
    """The payment's refunds and dispute and its reversal; nothing when none came."""
    r = p.reversal
    if r is None:
        return []
    refunded, charge = r.refunded.formatted if r.refunded else None, r.charge_amount_refunded
    if refunded and p.amount:
        partial = r.refunded is not None and r.refunded.minor_units < p.amount.minor_units
        refunded += f" of {p.amount.formatted} paid" + (" (partial)" if partial else "")
    facts: dict[str, Any] = {
        "refunds": ", ".join(
            f"{f.id} {_refund_amount(f)}"
            + (f" (reversed {f.reversed.formatted}, key {f.reversal_key})" if f.reversed else "")
            for f in r.refunds
        ),
        "refunded": refunded,
        "a charge event's amount_refunded": charge.formatted if charge else None,
        "dispute": f"{r.dispute.id} closed {r.dispute.status}" if r.dispute else None,
        "dispute open": f"{r.open_dispute} (nothing taken back unless it closes lost)"
        if r.open_dispute
        else None,
        "taken back": _taken_back(p),
        "reversal": _reversal(p),
        "reversal's last error": p.last_error if p.leg == "reverse" else None,
        "reversed": r.reversed_at,
        "reversed in all": r.reversed_amount.formatted if r.reversed_amount else None,
        "reversal's receipt": receipt(r.receipt),
        "given back after it": _reinstated(p, r),
        "fulfilled again": _refulfil(p),
        "receipt of its fulfilment again": receipt(r.refulfil.receipt) if r.refulfil else None,
        "taken back again": _retake(r),
        "taken back by hand": r.taken_back_by_hand_at,
    }
    return [kv_table("Refunds and disputes", {k: v for k, v in facts.items() if v})]


def receipt(found: dict[str, Any] | None) -> str | None:
    """A receipt's fields as 'name: value' (nested values as JSON), noting an effect's
    receipt that says ``rowcount`` 0 (a SQL effect's WHERE that matched nothing:
    workers/effects.py) in words true of either kind: the receipt holds a statement's count
    or what an ``_EFFECT`` function returned, not which kind ran."""
    if not found:
        return None
    shown = ", ".join(
        f"{k}: {v if isinstance(v, str) else to_json(v).decode()}" for k, v in found.items()
    )
    inner = found.get("receipt")
    if isinstance(inner, dict) and inner.get(ROWCOUNT) == 0:
        shown += " (its effect says it touched no row)"
    return shown
