"""What a person does next with a payment that waits for them (ledger/read/next_step.py):
the key its calls carry, as the workers build it for each leg, and the decisions offered,
read from payment hashes as Redis holds them."""

import json

from ledger.read.next_step import elsewhere, next_step
from ledger.read.payments import payment_record

PK = "pi_1"


def step_of(reverses: bool = True, **fields: str):
    return next_step(payment_record(PK, {"token": "2", "amount": "2000", **fields}), reverses)


def test_an_interrupted_fulfilment_is_checked_under_its_fulfilment_key() -> None:
    step = step_of(state="interrupted")
    assert step is not None and step.kind == "check" and step.idempotency_key == f"fulfil:{PK}"
    assert step.commands == [
        (f"webhook-ledger resolve {PK} --fulfilled", "It was applied: mark fulfilled"),
        (f"webhook-ledger resolve {PK} --retry", "It was not: run again"),
    ]


def test_a_reversal_is_checked_under_its_own_key_or_its_refund_s() -> None:
    rf = json.dumps({"re_1": 500, "re_2": 1500})
    whole = step_of(state="interrupted", leg="reverse", rf=rf, reversal_amount="2000")
    assert whole is not None and whole.idempotency_key == f"reverse:{PK}"
    assert whole.fulfilled == "It was taken back: mark reversed"
    assert whole.retry == "It was not: run the reversal again"
    one = step_of(state="interrupted", leg="reverse", rf=rf, reversal_refund="re_2")
    assert one is not None and one.idempotency_key == f"reverse:{PK}:re_2"


def test_a_fulfilment_again_is_checked_under_its_own_key() -> None:
    step = step_of(state="held", leg="refulfil", dispute="du_1 won", refulfil_from="1")
    assert step is not None and step.kind == "decide" and step.idempotency_key == f"refulfil:{PK}"


def test_a_payment_only_a_person_grants_offers_no_retry() -> None:
    step = step_of(state="held", by_hand="1", reinstated_at="1")
    assert step is not None and step.kind == "reinstated" and step.retry is None
    assert [c for c, _ in step.commands] == [f"webhook-ledger resolve {PK} --fulfilled"]
    again = step_of(state="held", by_hand="1", leg="refulfil", retake="refund", rf="{}")
    assert again is not None and again.kind == "retake"
    assert again.fulfilled == "Taken back by hand: mark reversed"


def test_a_payment_held_after_it_was_taken_back_offers_not_applied() -> None:
    """Held after a refund in full while a call may have applied: a retry only holds it
    again while Stripe takes it back, so the step offers --not-applied (refunded_unfulfilled)
    beside --fulfilled (then reversed)."""
    step = step_of(state="held", taken_back="refund", rf=json.dumps({"re_1": 2000}))
    assert step is not None and step.kind == "decide"
    resolve = f"webhook-ledger resolve {PK}"
    assert step.commands == [
        (f"{resolve} --fulfilled", "It was applied: mark fulfilled (then reversed)"),
        (f"{resolve} --not-applied", "It was not: refunded_unfulfilled, no reversal"),
        (f"{resolve} --retry", "Stripe gave it back since: run again"),
    ]
    plain = step_of(state="held")
    assert plain is not None and plain.not_applied is None and plain.retry is not None
    given = step_of(state="held", by_hand="1", taken_back="refund", reinstated_at="1")
    assert given is not None and given.not_applied is None and given.retry is None
    kept = step_of(False, state="held", taken_back="refund", rf=json.dumps({"re_1": 2000}))
    assert kept is not None and kept.fulfilled == "It was applied: mark fulfilled"  # no reversal


def test_a_payment_held_before_any_call_speaks_of_none() -> None:
    """Held before its first attempt (a live-mode event in a test deployment, a possible
    duplicate): no downstream saw a key, nothing was applied (docs audit: the step said
    "what the downstream saw" and "It was applied")."""
    step = next_step(payment_record(PK, {"state": "held", "amount": "2000"}), True)
    assert step is not None and step.kind == "decide"
    assert step.key_said == "Idempotency key its call will carry (no call yet)"
    assert step.check == "Held for a person before any call (see why above). Decide"
    assert step.commands == [
        (f"webhook-ledger resolve {PK} --fulfilled", step.fulfilled),
        (f"webhook-ledger resolve {PK} --retry", "Fulfil it: run it now"),
    ]
    assert "applied" not in step.fulfilled
    twin = next_step(
        payment_record(PK, {"state": "held", "amount": "2000", "same_purchase_as": "in_1"}), True
    )
    assert twin is not None and twin.retry == (  # a retry holds it again while in_1 is engaged
        "Fulfil it: run it now, if in_1 (the same purchase) has no effect and runs none "
        "(while it has or may have one, it is held again)"
    )
    called = step_of(state="held")
    assert called is not None and called.key_said.endswith("(what the downstream saw)")


def test_no_step_unless_it_waits_for_a_decision_and_no_receipt_to_check_when_none_came() -> None:
    assert step_of(state="failed") is None and step_of(state="fulfilled") is None
    waiting = payment_record(PK, {"state": "interrupted", "token": "1"})
    assert elsewhere(waiting).startswith("no receipt came")
    assert elsewhere(payment_record(PK, {"state": "queued"})) == "no call yet"
    done = payment_record(PK, {"state": "fulfilled", "token": "1", "receipt": '{"ok": 1}'})
    assert (
        elsewhere(done)
        == f"check the receipt below against your system for the idempotency key fulfil:{PK}"
    )


def test_a_payment_held_after_a_taking_back_stripe_undid_since_is_not_offered_not_applied() -> None:
    """Held after a dispute lost while a call may have applied, then the dispute won: Stripe
    no longer takes it back, so --not-applied (refunded_unfulfilled) would be refused
    (operator.lua) and is not offered; a retry or a resolve is (found by the explorer at
    seed 7006)."""
    held = {"state": "held", "taken_back": "dispute", "hold_reason": "dispute lost after …"}
    lost = step_of(**held, dispute="dp_1 lost")
    assert lost is not None and lost.not_applied is not None
    won = step_of(**held, dispute="dp_1 won")
    assert won is not None and won.not_applied is None and won.retry == "It was not: run again"
    assert [c.rsplit(" ", 1)[1] for c, _ in won.commands] == ["--fulfilled", "--retry"]
