"""Why a payment is where it is, as lists show it (ledger/read/payment_reasons.py), read
from payment hashes as Redis holds them."""

from ledger.read.payment_reasons import reason
from ledger.read.payments import payment_record

LIVE = "live-mode event in a test deployment (STRIPE_MODE=test)"


def test_a_hold_decided_is_said_as_history_never_as_why_it_is_where_it_is() -> None:
    """Held, retried by a person, fulfilled by a worker: its list row read as the reason it
    was fulfilled (docs audit)."""
    held = payment_record("pi_1", {"state": "held", "hold_reason": LIVE})
    assert reason(held) == LIVE
    for state in ("fulfilled", "reversed", "refunded_unfulfilled"):
        done = payment_record("pi_1", {"state": state, "token": "1", "hold_reason": LIVE})
        assert reason(done) == f"was held: {LIVE}"
    by_hand = {"state": "fulfilled", "hold_reason": LIVE, "fulfilled_by_hand": "1"}
    assert (
        reason(payment_record("pi_1", by_hand))
        == f"marked fulfilled by a person (was held: {LIVE})"
    )


def test_a_retrying_payment_s_error_comes_before_an_old_hold() -> None:
    fields = {"state": "retrying", "token": "2", "hold_reason": LIVE, "last_error": "http 503"}
    assert reason(payment_record("pi_1", fields)) == "http 503"
