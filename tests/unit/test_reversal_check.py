"""The reversal half of the checker finds each kind of wrong reversal, and the client's view
of what was taken back reads Stripe's refund and dispute events as Stripe means them."""

import random

from ledgerctl import samples, takebacks
from ledgerctl.reversal_check import Regrant, Reversals, check_reversals, from_marks

ONE = Reversals(keys=1, applied=1, calls=1)


def test_each_taken_back_effect_reversed_once_passes() -> None:
    found = check_reversals(
        {"pi_a": True, "pi_b": True, "pi_c": False},
        True,
        effects={"pi_a": 1, "pi_b": 0, "pi_c": 1},
        states={"pi_a": "reversed", "pi_b": "refunded_unfulfilled", "pi_c": "fulfilled"},
        reversals={"pi_a": ONE},
        fulfil_calls={"pi_a": 1},
    )
    assert found.ok and found.checks == 3 and found.reversed == 1 and found.taken_back == 2
    assert found.refunded_unfulfilled == ["pi_b"]


def test_it_finds_twice_missing_orphaned_and_called_after_refund() -> None:
    found = check_reversals(
        {"pi_twice": True, "pi_missing": True, "pi_orphan": True, "pi_partial": False,
         "pi_called": True, "pi_person": True},
        True,
        effects={"pi_twice": 1, "pi_missing": 1, "pi_partial": 1, "pi_called": 0, "pi_person": 1},
        states={"pi_twice": "reversed", "pi_missing": "fulfilled",
                "pi_orphan": "refunded_unfulfilled", "pi_partial": "fulfilled",
                "pi_called": "refunded_unfulfilled", "pi_person": "interrupted"},
        reversals={"pi_twice": Reversals(2, 2, 2), "pi_orphan": ONE, "pi_partial": ONE},
        fulfil_calls={"pi_called": 1},
    )  # fmt: skip
    assert [t["payment"] for t in found.twice] == ["pi_twice"]
    assert found.missing == ["pi_missing"] and found.for_a_person == ["pi_person"]
    assert {o["payment"]: o["why"] for o in found.orphaned} == {
        "pi_orphan": "no effect",
        "pi_partial": "not taken back",
    }
    assert [c["payment"] for c in found.called_after_refund] == ["pi_called", "pi_orphan"]
    assert not found.ok


def test_a_key_applied_twice_is_twice_and_no_reversal_action_expects_none() -> None:
    again = check_reversals({"pi_a": True}, True, {"pi_a": 1}, {}, {"pi_a": Reversals(1, 2, 2)})
    assert again.twice and not again.ok
    off = check_reversals({"pi_a": True}, False, {"pi_a": 1}, {"pi_a": "fulfilled"}, {})
    assert off.ok and off.taken_back == 1
    assert check_reversals({"pi_a": True}, False, {"pi_a": 1}, {}, {"pi_a": ONE}).orphaned


def test_the_client_view_of_each_kind_of_take_back() -> None:
    rng = random.Random(3)
    payments = [samples.payment_events(rng) for _ in takebacks.KINDS]
    sent = [e for n, events in enumerate(payments) for e in events]
    for n, events in enumerate(payments):
        sent += takebacks.for_payment(rng, events, takebacks.kind_of(n))
    taken = takebacks.taken_back(sent)
    by_kind = {
        takebacks.kind_of(n): taken.get(p[2]["data"]["object"]["id"])
        for n, p in enumerate(payments)
    }
    assert by_kind == {
        "none": None,
        "full": True,
        "partial": False,
        "partials": True,
        "dispute_lost": True,
        "dispute_won": False,
    }


def test_refund_events_carry_what_stripe_sends() -> None:
    rng = random.Random(4)
    events = samples.payment_events(rng)
    charge = events[1]["data"]["object"]
    created, refunded, updated = takebacks.for_payment(rng, events, "full")
    assert [created["type"], refunded["type"], updated["type"]] == [
        "refund.created", "charge.refunded", "refund.updated",
    ]  # fmt: skip
    assert created["data"]["object"]["status"] == "pending"
    assert updated["data"]["object"]["status"] == "succeeded"
    listed = refunded["data"]["object"]
    assert listed["amount_refunded"] == charge["amount"] and listed["refunded"] is True
    assert listed["refunds"]["data"][0]["id"] == created["data"]["object"]["id"]
    assert {e["data"]["object"]["payment_intent"] for e in (created, refunded, updated)} == {
        charge["payment_intent"]
    }
    failed = dict(created["data"]["object"], status="failed", amount=charge["amount"])
    assert takebacks.taken_back([events[1], {**created, "data": {"object": failed}}]) == {
        charge["payment_intent"]: False
    }


def test_per_refund_keys_are_checked_by_the_count_due() -> None:
    """Reversals per refund (one key each): the count due per payment comes from the caller."""
    two = Reversals(keys=2, applied=2, calls=3)
    due = {"pi_a": 2, "pi_b": 2}
    found = check_reversals(
        {"pi_a": False, "pi_b": False},
        True,
        {"pi_a": 1, "pi_b": 1},
        {"pi_a": "fulfilled", "pi_b": "fulfilled"},
        {"pi_a": two, "pi_b": Reversals(3, 3, 3)},
        expected_keys=due,
    )
    assert [t["payment"] for t in found.twice] == ["pi_b"] and not found.missing


def test_per_refund_reversals_due_are_one_per_refund_and_each_key_once() -> None:
    """With REVERSAL_PER_REFUND the replay expects one key per refund counted
    (``reverse:{pk}:{refund_id}``), plus one for what a lost dispute leaves."""
    rng = random.Random(5)
    payments = [samples.payment_events(rng) for _ in takebacks.KINDS]
    sent = [e for events in payments for e in events]
    for n, events in enumerate(payments):
        sent += takebacks.for_payment(rng, events, takebacks.kind_of(n))
    due = takebacks.reversals_due_each(sent)
    by_kind = {
        takebacks.kind_of(n): due.get(p[2]["data"]["object"]["id"]) for n, p in enumerate(payments)
    }
    assert by_kind == {
        "none": None,
        "full": 1,
        "partial": 1,
        "partials": 2,
        "dispute_lost": 1,
        "dispute_won": 0,
    }
    partials = next(
        p[2]["data"]["object"]["id"]
        for n, p in enumerate(payments)
        if takebacks.kind_of(n) == "partials"
    )
    taken = takebacks.taken_back(sent)
    two = {partials: Reversals(keys=2, applied=2, calls=2)}
    each = check_reversals(
        {partials: taken[partials]}, True, {partials: 1}, {partials: "reversed"}, two,
        expected_keys=due,
    )  # fmt: skip
    assert each.ok and each.reversed == 1
    # without the count due per refund the two keys would read as one reversal twice
    assert check_reversals({partials: True}, True, {partials: 1}, {}, two).twice


def test_a_dispute_lost_then_won_is_taken_back_then_won_later_the_same_dispute() -> None:
    """``dispute_lost_won``: the lost dispute's events now, the same dispute closed won in a
    later wave (30 days on); the client reads it as taken back and won after its loss."""
    rng = random.Random(6)
    events = samples.payment_events(rng)
    pi = events[2]["data"]["object"]["id"]
    lost = takebacks.for_payment(rng, events, "dispute_lost_won")
    assert [(e["type"], e["data"]["object"]["status"]) for e in lost][-1] == (
        "charge.dispute.closed", "lost",
    )  # fmt: skip
    won = takebacks.later_for_payment(rng, lost, "dispute_lost_won")
    assert [(e["type"], e["data"]["object"]["status"]) for e in won] == [
        ("charge.dispute.funds_reinstated", "won"), ("charge.dispute.closed", "won"),
    ]  # fmt: skip
    assert {e["data"]["object"]["id"] for e in lost + won} == {lost[0]["data"]["object"]["id"]}
    assert min(e["created"] for e in won) > max(e["created"] for e in lost)
    assert takebacks.later_for_payment(rng, lost, "dispute_lost") == []
    assert takebacks.taken_back(events + lost + won) == {pi: True}
    assert takebacks.won_after_loss(events + won + lost) == {pi}  # by created, not by order
    assert takebacks.won_after_loss(events + lost) == set()
    never_lost = takebacks.for_payment(rng, events, "dispute_won")
    assert takebacks.won_after_loss(events + never_lost) == set()


def test_a_dispute_won_after_its_reversal_is_re_granted_once_or_waits_for_a_person() -> None:
    """Reversed for its lost dispute, then won: under REVERSAL_DISPUTE_WON=fulfil one re-grant
    is expected (none: not re-granted); held (the default, hold) waits for a person; left
    reversed is not re-granted either way; a lost dispute never won asks for nothing."""
    taken = {"pi_again": True, "pi_none": True, "pi_held": True, "pi_lost": True}
    won = {"pi_again", "pi_none", "pi_held"}
    effects = dict.fromkeys(taken, 1)
    states = {"pi_again": "fulfilled", "pi_none": "reversed", "pi_held": "held",
              "pi_lost": "reversed"}  # fmt: skip
    reversed_once = dict.fromkeys(taken, ONE)
    fulfil = Regrant(on=True, counted={"pi_again": 1})
    found = check_reversals(taken, True, effects, states, reversed_once, None, None, won, fulfil)
    assert found.not_regranted == ["pi_none"] and found.for_a_person == ["pi_held"]
    assert (found.won_after_loss, found.regranted, found.reversed) == (3, 1, 4)
    assert not found.ok
    hold = check_reversals(taken, True, effects, states, reversed_once, None, None, won)
    assert hold.for_a_person == ["pi_held"] and hold.not_regranted == ["pi_none"]
    resolved = {**states, "pi_none": "fulfilled"}  # a person granted it again by hand
    assert check_reversals(taken, True, effects, resolved, reversed_once, None, None, won).ok


def test_without_a_downstream_record_the_ledger_marks_count_the_reversals() -> None:
    """A payment's hash keeps its reversals whatever its state now: one per refund reversed on
    its own (``rv``), one more for what the reversals carried beyond those."""
    marks = {
        "pi_whole": {"reversed_at": "1", "reversed_amount": "500"},
        "pi_again": {"reversed_at": "1", "reversed_amount": "500", "refulfilled_at": "2"},
        "pi_two": {"rv": '{"re_a": 200, "re_b": 300}', "reversed_amount": "500"},
        "pi_rest": {"reversed_at": "1", "rv": '{"re_a": 200}', "reversed_amount": "500"},
        "pi_before": {"reversed_at": "1"},
        "pi_unknown": {"reversed_at": "1", "rv": '{"re_a": 200}', "reversed_amount": "200",
                       "rest_reversed": "1"},
        "pi_none": {"fulfilled_at": "1"},
    }  # fmt: skip
    found = {pk: r.keys for pk, r in from_marks(marks).items()}
    assert found == {
        "pi_whole": 1,
        "pi_again": 1,
        "pi_two": 2,
        "pi_rest": 2,
        "pi_before": 1,
        "pi_unknown": 2,
    }


def test_a_full_refund_failed_later_is_taken_back_then_given_back() -> None:
    """``full_failed``: the events of ``full`` now, the same refund failed in a later wave
    (``refund.failed`` and ``charge.refund.updated``, status failed, a week on); the client
    reads it as taken back (the charge still says refunded in full) and given back."""
    rng = random.Random(7)
    events = samples.payment_events(rng)
    pi = events[2]["data"]["object"]["id"]
    refunded = takebacks.for_payment(rng, events, "full_failed")
    assert [e["type"] for e in refunded] == ["refund.created", "charge.refunded", "refund.updated"]
    failed = takebacks.later_for_payment(rng, refunded, "full_failed")
    assert [(e["type"], e["data"]["object"]["status"]) for e in failed] == [
        ("refund.failed", "failed"), ("charge.refund.updated", "failed"),
    ]  # fmt: skip
    refund = refunded[-1]["data"]["object"]
    for event in failed:
        obj = event["data"]["object"]
        assert {k: obj[k] for k in ("id", "amount", "charge", "payment_intent", "created")} == {
            k: refund[k] for k in ("id", "amount", "charge", "payment_intent", "created")
        }
        assert obj["failure_reason"] and obj["failure_balance_transaction"].startswith("txn_")
    assert failed[1]["data"]["previous_attributes"] == {"status": "succeeded"}
    assert min(e["created"] for e in failed) > max(e["created"] for e in refunded)
    assert len({e["id"] for e in refunded + failed}) == 5
    assert takebacks.later_for_payment(rng, refunded, "full") == []
    # the charge's amount_refunded still counts it: taken back, whatever the events' order
    assert takebacks.taken_back(events + refunded + failed) == {pi: True}
    assert takebacks.given_back_by_refund(events + failed + refunded) == {pi}
    assert takebacks.given_back_by_refund(events + refunded) == set()
    again = takebacks.refund_events(rng, events[1]["data"]["object"], refund["amount"], [])
    assert takebacks.given_back_by_refund(events + refunded + failed + again) == set()
    lost = takebacks.for_payment(rng, events, "dispute_lost")
    assert takebacks.given_back_by_refund(events + refunded + failed + lost) == set()


def test_a_refund_failed_after_it_was_taken_back_waits_for_a_person() -> None:
    """Reversed (or refunded before any effect), then its refund failed: held is waiting for
    a person; left reversed or refunded_unfulfilled, or fulfilled again, is not held; a
    person's grant (fulfilled) passes; with an effect and no reversal action, nothing is
    expected of it (it stays fulfilled); a refund never failed asks for nothing."""
    taken = dict.fromkeys(
        ("pi_held", "pi_reversed", "pi_before", "pi_left", "pi_again", "pi_granted", "pi_full"),
        True,
    )
    given = set(taken) - {"pi_full"}
    effects = {**dict.fromkeys(taken, 1), "pi_before": 0, "pi_left": 0}
    states = {"pi_held": "held", "pi_reversed": "reversed", "pi_before": "held",
              "pi_left": "refunded_unfulfilled", "pi_again": "fulfilled",
              "pi_granted": "fulfilled", "pi_full": "reversed"}  # fmt: skip
    reversed_once = {pk: ONE for pk, n in effects.items() if n}
    again = Regrant(counted={"pi_again": 1})
    found = check_reversals(
        taken, True, effects, states, reversed_once, None, None, (), again, given
    )  # fmt: skip
    assert found.for_a_person == ["pi_before", "pi_held"]
    assert found.not_held == ["pi_again", "pi_left", "pi_reversed"]
    assert found.given_back == 6 and found.refunded_unfulfilled == ["pi_left"]
    assert not found.ok and not (found.twice or found.missing or found.orphaned)
    held = {pk: "held" for pk in given} | {"pi_granted": "fulfilled", "pi_full": "reversed"}
    found = check_reversals(taken, True, effects, held, reversed_once, None, None, (), None, given)
    assert found.ok and len(found.for_a_person) == 5 and found.not_held == []
    # no reversal action: a payment with its effect stays fulfilled, one without is held
    kept = {"pi_held": "fulfilled", "pi_before": "held"}
    found = check_reversals(
        {"pi_held": True, "pi_before": True}, False, {"pi_held": 1}, kept, {},
        given_back={"pi_held", "pi_before"},
    )  # fmt: skip
    assert found.ok and found.given_back == 1 and found.for_a_person == ["pi_before"]
    # the existing reading of what was taken back is the same without them
    assert check_reversals(taken, True, effects, states, reversed_once).not_held == []
