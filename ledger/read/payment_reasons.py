"""Why a payment is where it is, as people read it: the reason a list shows (``reason``)
and the attempt whose retry was refused for want of attempts (``spent``).

Apart from ledger/read/payments.py, which reads what Redis stores: these only judge a
payment already read, for the CLI and the dashboard.
"""

from ledger.read.payments import Payment, PaymentRow
from ledger.read.timeline import Attempt

TAKEN_BACK = {"refund": "refunded in full", "dispute": "a dispute lost"}
TAKEN_BEFORE_PAID = {"refund": "refunded", "dispute": "a dispute lost"}
"""With no paid record the amount paid is not known: any refund says it, not "in full"."""
SETTLED = ("fulfilled", "reversed", "refunded_unfulfilled")
"""States a payment's last error no longer explains: a worker's success clears it, and a
person's decision leaves it as history (the payment's own page shows it)."""
BY_A_PERSON = "marked fulfilled by a person"


def spent(p: Payment, a: Attempt) -> bool:
    """Whether ``a`` is the attempt whose retry the ledger refused for want of attempts: the
    failed payment's last, its error the payment's (not a payment failed by lost jobs)."""
    return p.state == "failed" and a is p.attempts[-1] and a.error == p.last_error


def reason(p: PaymentRow) -> str | None:
    """Why a payment is where it is, as lists show it: a held one's hold reason, any other's
    last error (a reversal's starts with ``reversal: ``), then what is left of either (a
    hold reason stays after its hold was decided); an interrupted fulfilment taken back since
    says so first (it decides what a person does: docs/RUNBOOK.md). A settled payment's
    last error is never its reason, and its hold reason is said as history ("was held: ");
    one a person marked fulfilled says so."""
    error = None if p.state in SETTLED else p.last_error
    first, then = (p.hold_reason, error) if p.state == "held" else (error, p.hold_reason)
    why = first or then
    if p.state == "fulfilled" and p.fulfilled_by_hand:
        return f"{BY_A_PERSON} (was held: {why})" if why else BY_A_PERSON
    if p.state in SETTLED and p.hold_reason and why == p.hold_reason:
        return f"was held: {why}"  # its hold decided (a retry), not why it is where it is
    if p.state == "pending" and p.paid_at is None and p.taken_back in TAKEN_BACK:
        return (
            f"{TAKEN_BEFORE_PAID[p.taken_back]}, with no paid "
            "record yet (its paid event may still come; else purged after "
            "PAYMENT_RETENTION_DAYS, or paid before this ledger ran): nothing reversed"
        )
    if p.state == "interrupted" and p.leg == "fulfil" and p.taken_back in TAKEN_BACK:
        return f"{TAKEN_BACK[p.taken_back]} since; {why}" if why else TAKEN_BACK[p.taken_back]
    return why


def not_paid(p: Payment) -> str | None:
    """Why a payment with no paid event has none, when Stripe said so (a payment failed, an
    async payment failed, a session expired): it stays pending, and only a paid event that
    follows (a retry of the payment) fulfils it."""
    if p.paid_by or not p.last_failed_event_type:
        return None
    return (
        f"not paid: {p.last_failed_event_type} came; it is fulfilled only if a paid event "
        "follows (the customer pays again)"
    )
