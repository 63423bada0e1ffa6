"""What a person's decision answers (ledger/decisions.py): on one payment, or on every
payment in a state."""

from ledger.read.base import View
from ledger.read.payments import PaymentState


class Decision(View):
    payment_key: str
    state: PaymentState


class BulkDecision(View):
    action: str
    state: str
    since: str | None
    error: str | None
    dry_run: bool
    matched: int
    requeued: int
    """Re-queued by this run: a payment another run (or a worker) moved first is not."""
    still_running: int
    """Interrupted payments left alone: their last call may still be running (try later)."""
    by_hand: int
    """Held payments left out: only a person acts on each, by hand (a retry runs nothing)."""
    payment_keys: list[str]
    """The first 100: matched on a dry run, re-queued otherwise."""
