"""A payment the ledger took back (refunded in full, a dispute lost) that Stripe no longer
takes back: its refund failed or was canceled, its dispute was won. The customer paid, so
it is never left `refunded_unfulfilled` or `reversed` silently: it is held for a person,
who grants it by hand and resolves it as fulfilled; a retry runs nothing of the ledger's
(docs/REVERSAL.md, "When Stripe gives it back")."""

import json

import pytest

from ledger import keys
from ledger.decisions import decide_bulk
from tests.integration.test_lua_reversal import (
    Shop,
    per_refund_shop,
    reverse_all,
    reversed_then_won,
)
from tests.integration.test_settlement import ambiguous_then_refunded, settle
from tests.support.constants import BEARER
from tests.support.helpers import run_cli
from tests.support.refunds import dispute_closed, refund_events, refund_failed


def refunded_in_full(shop: Shop) -> list[dict]:
    events = refund_events(shop.rng, shop.pk, shop.amount, shop.amount)
    for event in events:
        shop.deliver(event)
    return events


def fulfilled_then_refunded(shop: Shop) -> list[dict]:
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    return refunded_in_full(shop)


def decide(shop: Shop, decision: str) -> tuple[str, str]:
    return shop.attempts.record_decision(shop.pk, decision, ("held",), "ops:alice")


@pytest.mark.parametrize("reverse", [False, True])
def test_a_refund_failed_after_it_was_refunded_before_any_effect_holds_it(
    redis, redis_server, rng, reverse
) -> None:
    """The charge event still says refunded in full: the failure is believed over it for a
    person, never for a call (the ledger does not fulfil it on its own)."""
    shop = Shop(redis_server, rng, reverse)
    shop.deliver(shop.paid)
    events = refunded_in_full(shop)
    assert shop.state() == "refunded_unfulfilled" and shop.field("rf_charge")
    assert shop.deliver(refund_failed(rng, events[0])) == "held"
    assert shop.field("hold_reason").startswith("a refund failed or was canceled after it")
    assert shop.field("reinstated_at") and shop.field("token") == "0"
    assert redis.hget(keys.STATS, "reinstated") == b"1"
    assert shop.attempts.start(shop.pk, "job", True).verdict != "go"  # the paid event's job
    assert decide(shop, "retry") == ("by_hand", "held")
    assert decide(shop, "fulfilled") == ("ok", "fulfilled")
    assert "ops:alice" in shop.field("receipt") and shop.field("by_hand") == ""
    # the refund that failed does not reverse what a person granted, nor does a copy of it
    assert shop.deliver(refund_failed(rng, events[2])) == "fulfilled"
    assert shop.field("leg") == ""


def test_a_dispute_won_after_it_was_lost_before_any_effect_holds_it(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "lost")) == (
        "refunded_unfulfilled"
    )
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "won")) == "held"
    assert shop.field("hold_reason").startswith("its dispute was won after it was taken back")


def test_refunded_again_while_held_it_is_refunded_unfulfilled_again(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    shop.deliver(refund_failed(rng, refunded_in_full(shop)[0]))
    assert shop.state() == "held"
    refunded_in_full(shop)  # the merchant refunds it again, and that one succeeds
    assert shop.state() == "refunded_unfulfilled"


def test_a_refund_failed_after_its_reversal_holds_it(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    receipt = shop.field("receipt")
    events = refunded_in_full(shop)
    assert shop.attempt("reverse") == "reversed"
    assert shop.deliver(refund_failed(rng, events[0])) == "held"
    assert shop.field("hold_reason").startswith("a refund failed or was canceled after its")
    assert decide(shop, "retry") == ("by_hand", "held")
    assert decide(shop, "fulfilled") == ("ok", "fulfilled")
    assert shop.field("receipt") == receipt  # the first fulfilment's, kept


def test_a_refund_failed_while_its_reversal_runs_holds_it_once_reversed(
    redis, redis_server, rng
) -> None:
    """The reversal is not withdrawn (its call may be under way), and not left silently."""
    shop = Shop(redis_server, rng)
    events = fulfilled_then_refunded(shop)
    assert shop.deliver(refund_failed(rng, events[0])) == "queued"
    assert shop.field("leg") == "reverse"
    assert shop.attempt("reverse") == "held"
    assert shop.field("reversed_at") and shop.field("reinstated_at")


def test_a_refund_failed_after_a_settlement_voided_the_key_holds_it_and_refuses_a_retry(
    redis, redis_server, rng
) -> None:
    """No attempt can apply it under its voided key: a retry would only fail."""
    shop = Shop(redis_server, rng)
    ambiguous_then_refunded(shop)
    assert settle(shop, "voided") == ("voided", "refunded_unfulfilled")
    assert shop.deliver(refund_failed(rng, {"data": {"object": _refund_of(shop)}})) == "held"
    assert "voided its key" in shop.field("hold_reason")
    assert decide(shop, "retry") == ("by_hand", "held")
    assert decide(shop, "fulfilled") == ("ok", "fulfilled")


def test_a_settlement_held_for_a_refund_undone_refuses_a_retry(redis, redis_server, rng) -> None:
    """Held when its settlement's answer was lost and its refund failed: before, a person's
    retry ran the fulfilment under the voided key and only failed."""
    shop = Shop(redis_server, rng)
    ambiguous_then_refunded(shop)
    start = shop.attempts.start(shop.pk, "job-settle", True, leg="settle", settles=True)
    shop.deliver(refund_failed(rng, {"data": {"object": _refund_of(shop)}}))
    assert shop.attempts.finish(shop.pk, start.token, "voided", "{}", 1.0) == ("voided", "held")
    assert decide(shop, "retry") == ("by_hand", "held")


def _refund_of(shop: Shop) -> dict:
    """The refund ambiguous_then_refunded made, as its refund object."""
    refund_id, amount = next(iter(json.loads(shop.field("rf")).items()))
    return {
        "id": refund_id,
        "object": "refund",
        "amount": amount,
        "currency": "usd",
        "payment_intent": shop.pk,
        "charge": "ch_" + shop.pk.removeprefix("pi_"),
        "status": "succeeded",
    }


def test_a_refund_that_failed_while_a_fulfilment_again_waited_does_not_withdraw_it(
    redis, redis_server, rng
) -> None:
    """REVERSAL_DISPUTE_WON=fulfil: refunded in full, then that refund failed (a day after
    the charge event that counted it), while its fulfilment again waited: no longer refunded,
    so it is called; before, the charge's figure kept it refunded and it was withdrawn."""
    shop = reversed_then_won(redis_server, rng)
    events = refunded_in_full(shop)
    assert shop.deliver(refund_failed(rng, events[0])) == "queued"
    assert shop.attempt("refulfil") == "fulfilled"
    assert shop.field("refulfilled_at")


def test_a_retry_is_refused_saying_why_on_the_cli_and_the_ops_api(
    redis, redis_server, rng, config, client
) -> None:
    """Not "held, not failed or held": the refusal says a person grants it."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    shop.deliver(refund_failed(rng, refunded_in_full(shop)[0]))
    cli = run_cli(config, "retry", shop.pk)
    assert (
        cli.exit_code == 1
        and "Only a person decides" in cli.stdout
        and "Grant it" not in cli.stdout
    ), cli.stdout
    answer = client.post(f"/ops/api/payments/{shop.pk}/retry", headers=BEARER)
    assert answer.status_code == 409 and answer.get_json()["error"] == "grant_by_hand"
    assert shop.state() == "held"
    page = client.get(f"/ops/payments/{shop.pk}", headers=BEARER).get_data(as_text=True)
    assert 'id="reinstated"' in page and "Granted by hand: mark fulfilled" in page
    assert "run again" not in page


def test_a_settlement_given_up_after_its_refund_failed_says_its_key_may_be_voided(
    redis, redis_server, rng
) -> None:
    """Not "refunded in full … could not settle it": the payment is no longer refunded."""
    shop = Shop(redis_server, rng)
    ambiguous_then_refunded(shop)
    start = shop.attempts.start(shop.pk, "job-settle", True, leg="settle", settles=True)
    shop.deliver(refund_failed(rng, {"data": {"object": _refund_of(shop)}}))
    assert shop.attempts.finish(shop.pk, start.token, "failed", "settle: refused", 1.0)[1] == (
        "held"
    )
    reason = shop.field("hold_reason")
    assert reason.startswith("its settlement may have voided its key"), reason
    assert shop.field("by_hand") == "" and shop.field("settle_gave_up") == ""
    # its key may be there, absent or voided: a retry is safe, and allowed
    assert decide(shop, "retry") == ("ok", "queued")


def test_reversed_then_given_back_then_refunded_again_is_reversed_again(
    redis, redis_server, rng
) -> None:
    """Not left held telling a person to grant what the customer was refunded for."""
    shop = Shop(redis_server, rng)
    events = fulfilled_then_refunded(shop)
    assert shop.attempt("reverse") == "reversed"
    assert shop.deliver(refund_failed(rng, events[0])) == "held"
    refunded_in_full(shop)  # refunded again, and that one succeeds
    assert (shop.state(), shop.field("by_hand"), shop.field("hold_reason")) == ("reversed", "", "")
    assert shop.field("reversal_amount") == "" and redis.hget(keys.STATS, "reversals") == b"1"


def test_each_event_of_one_failure_counts_it_once(redis, redis_server, rng) -> None:
    """refund.failed, then refund.updated and charge.refund.updated for the same failure."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    events = refunded_in_full(shop)
    for event in (events[0], events[2], events[0]):
        assert shop.deliver(refund_failed(rng, event)) == "held"
    assert redis.hget(keys.STATS, "reinstated") == b"1"


def test_a_voided_key_given_back_then_refunded_again_is_not_settled_again(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    ambiguous_then_refunded(shop)
    assert settle(shop, "voided") == ("voided", "refunded_unfulfilled")
    shop.deliver(refund_failed(rng, {"data": {"object": _refund_of(shop)}}))
    assert shop.state() == "held"
    refunded_in_full(shop)
    assert shop.state() == "refunded_unfulfilled" and shop.field("leg") == ""
    assert redis.hget(keys.STATS, "settles_due") == b"1"


def test_a_second_refund_told_only_by_its_charge_event_takes_it_back_again(
    redis, redis_server, rng
) -> None:
    """The first refund failed; the second's charge.refunded (API versions since 2022-11-15
    list no refunds) comes after that failure, so its amount_refunded is believed."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    first = refunded_in_full(shop)
    failed = refund_failed(rng, first[0])
    assert shop.deliver(failed) == "held"
    second = refund_events(rng, shop.pk, shop.amount, shop.amount)[1]
    del second["data"]["object"]["refunds"]
    second["created"] = failed["created"] + 60
    assert shop.deliver(second) == "refunded_unfulfilled"


def test_a_payment_granted_by_hand_then_refunded_again_is_reversed(
    redis, redis_server, rng
) -> None:
    """Never reversed before: its grant is taken back like any effect (REVERSAL_ACTION)."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    shop.deliver(refund_failed(rng, refunded_in_full(shop)[0]))
    assert decide(shop, "fulfilled") == ("ok", "fulfilled")
    refunded_in_full(shop)
    assert (shop.state(), shop.field("leg")) == ("queued", "reverse")


def test_a_record_held_as_its_purchase_s_other_record_says_so_when_given_back(
    redis, redis_server, rng
) -> None:
    """Not "has nothing": the purchase's other record may have had the effect."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    redis.hset(keys.payment(shop.pk), "same_purchase_as", "in_other")  # as tie_twin leaves it
    shop.deliver(refund_failed(rng, refunded_in_full(shop)[0]))
    reason = shop.field("hold_reason")
    assert "same purchase as in_other" in reason and "has nothing" not in reason


def test_an_interrupted_payment_given_back_then_fulfilled_is_not_said_taken_back(
    redis, redis_server, rng
) -> None:
    """Found by the explorer (seed 1010): its dispute lost while it waited for a person, then
    won; a person's retry fulfilled it, and it still said taken back (a reader, and the
    checks on fulfilled payments, took it for one never reversed)."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", False)
    assert shop.attempts.mark_calling(shop.pk, start.token)
    assert shop.attempts.finish(shop.pk, start.token, "interrupted", "died", 1.0)[1] == (
        "interrupted"
    )
    for status in ("lost", "won"):
        assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, status)) == "interrupted"
    verdict = shop.attempts.record_decision(shop.pk, "retry", ("interrupted",), "ops:alice")
    assert verdict == ("ok", "queued")
    assert shop.attempt() == "fulfilled"
    assert shop.field("taken_back") == "" and shop.field("leg") == ""


T = 1_700_000_000  # the created of every event refund_events makes


def dated(event: dict, created: int) -> dict:
    return {**event, "created": created}


def test_a_refund_and_its_failure_told_newest_first_still_holds_it(
    redis, redis_server, rng
) -> None:
    """As `webhook-ledger reconcile` records a missed refund from the Events API: its failure
    first. Never fulfilled on its own, as when told in order."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    created, charge, updated = refund_events(rng, shop.pk, shop.amount, shop.amount)
    for event in (refund_failed(rng, updated), charge, created):
        shop.deliver(event)
    assert shop.state() == "held" and shop.field("by_hand") == "1"
    assert shop.attempts.start(shop.pk, "job", True).verdict != "go"


def test_a_refund_and_its_failure_before_the_paid_event_hold_it(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    created, charge, updated = refund_events(rng, shop.pk, shop.amount, shop.amount)
    for event in (created, charge, refund_failed(rng, updated)):
        assert shop.deliver(event) == "pending"
    assert shop.deliver(shop.paid) == "held"


def test_a_failure_in_the_same_second_as_the_charge_event_goes_to_a_person(
    redis, redis_server, rng
) -> None:
    """Seconds cannot tell whether that charge figure still counted it: never unseen."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    events = refunded_in_full(shop)
    assert shop.deliver(dated(refund_failed(rng, events[0]), T)) == "held"


def test_a_charge_figure_kept_before_its_time_was_kept_goes_to_a_person(
    redis, redis_server, rng
) -> None:
    """A payment refunded before rf_charge_at existed (the largest figure, undated), whose
    refund fails after the upgrade."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    events = refunded_in_full(shop)
    redis.hdel(keys.payment(shop.pk), "rf_charge_at", "rf_charge_max")
    refund = {**events[0]["data"]["object"], "created": T}
    assert shop.deliver(refund_failed(rng, {"data": {"object": refund}})) == "held"


def test_an_update_of_a_failed_refund_does_not_date_its_failure(redis, redis_server, rng) -> None:
    """A refund.updated of a refund that had failed (a metadata change: no status in its
    previous_attributes) comes before the refund.failed; meanwhile the payment was refunded
    again, told only by its charge event: still refunded, never fulfilled."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    first = refunded_in_full(shop)
    later = dated(refund_failed(rng, first[2]), T + 300)
    later["type"] = "refund.updated"
    later["data"] = {**later["data"], "previous_attributes": {"metadata": {}}}
    shop.deliver(later)
    second = refund_events(rng, shop.pk, shop.amount, shop.amount)[1]
    del second["data"]["object"]["refunds"]
    assert shop.deliver(dated(second, T + 200)) == "refunded_unfulfilled"
    assert shop.attempts.start(shop.pk, "job", True).verdict != "go"


def test_a_dispute_lost_then_won_between_the_lease_and_the_fence_holds_it(
    redis, redis_server, rng
) -> None:
    """Found by the explorer: taken back before any call, then given back before its fence:
    not called on its own (as a waiting one is held), whatever the fence sees now."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", False)
    for status in ("lost", "won"):
        assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, status)) == "in_progress"
    assert not shop.attempts.mark_calling(shop.pk, start.token)
    assert shop.state() == "held" and shop.field("by_hand") == "1"


def test_an_interrupted_payment_given_back_then_resolved_is_not_said_taken_back(
    redis, redis_server, rng
) -> None:
    """Found by the explorer: a person found its effect after its dispute was lost and won."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", False)
    assert shop.attempts.mark_calling(shop.pk, start.token)
    shop.attempts.finish(shop.pk, start.token, "interrupted", "died", 1.0)
    for status in ("lost", "won"):
        shop.deliver(dispute_closed(rng, shop.pk, shop.amount, status))
    verdict = shop.attempts.record_decision(shop.pk, "fulfilled", ("interrupted",), "ops:bob")
    assert verdict == ("ok", "fulfilled") and shop.field("taken_back") == ""


def a_partial_refund_reversed(shop: Shop) -> tuple[list[dict], str, int]:
    """REVERSAL_PER_REFUND: a third of the payment refunded and reversed on its own; the
    payment fulfilled again."""
    part = shop.amount // 3
    events = refund_events(shop.rng, shop.pk, shop.amount, part)
    for event in events:
        shop.deliver(event)
    assert len(reverse_all(shop)) == 1 and shop.state() == "fulfilled"
    return events, events[0]["data"]["object"]["id"], part


def test_a_partial_refund_failed_after_its_own_reversal_holds_it_once(
    redis, redis_server, rng
) -> None:
    """The customer paid in full and part of the effect was taken back: before, the payment
    stayed fulfilled and nobody was told. Each event of the failure (refund.failed,
    refund.updated, charge.refund.updated) counts it once; resolved, it is not held again."""
    shop = per_refund_shop(redis_server, rng)
    events, refund_id, part = a_partial_refund_reversed(shop)
    assert shop.deliver(refund_failed(rng, events[0])) == "held"
    assert shop.field("hold_reason") == (
        f"a refund {refund_id} ({part}) failed after its reversal: grant back by hand what its "
        "reversal took, then resolve it as fulfilled (a retry runs nothing)"
    )
    assert shop.field("by_hand") == "1" and json.loads(shop.field("rv_failed")) == {refund_id: part}
    for event in (events[2], events[0]):  # the failure's other events, and a copy
        assert shop.deliver(refund_failed(rng, event)) == "held"
    assert redis.hget(keys.STATS, "reinstated") == b"1"
    assert decide(shop, "retry") == ("by_hand", "held")
    assert decide(shop, "fulfilled") == ("ok", "fulfilled")
    for event in (events[0], events[2]):
        assert shop.deliver(refund_failed(rng, event)) == "fulfilled"
    assert redis.hget(keys.STATS, "reinstated") == b"1"
    # never reversed in full: a later refund is reversed as any
    later = refund_events(rng, shop.pk, shop.amount, part)
    assert shop.deliver(later[2]) == "queued" and shop.field("leg") == "reverse"


def test_a_second_reversed_refund_failed_while_held_for_the_first_holds_it_again_on_resolve(
    redis, redis_server, rng
) -> None:
    """Before, the second failure was picked up only by an event after the person resolved
    the first, and with none it stayed fulfilled silently."""
    shop = per_refund_shop(redis_server, rng)
    first, _, part = a_partial_refund_reversed(shop)
    second = refund_events(rng, shop.pk, shop.amount, part, refunded_before=part)
    assert shop.deliver(second[2]) == "queued" and len(reverse_all(shop)) == 1
    assert shop.deliver(refund_failed(rng, first[0])) == "held"
    assert shop.deliver(refund_failed(rng, second[0])) == "held"
    assert decide(shop, "fulfilled") == ("ok", "held")
    second_id = second[0]["data"]["object"]["id"]
    assert shop.field("hold_reason").startswith(f"a refund {second_id} ({part}) failed after")
    assert redis.hget(keys.STATS, "reinstated") == b"2"
    assert decide(shop, "fulfilled") == ("ok", "fulfilled")


def test_what_a_person_granted_back_is_reversed_by_a_later_refund_in_full(
    redis, redis_server, rng
) -> None:
    """The failed refund's reversal no longer counts once a person granted back what it
    took: a later refund in full reverses the whole payment, not what was paid less it."""
    shop = per_refund_shop(redis_server, rng)
    first, _, part = a_partial_refund_reversed(shop)
    assert shop.field("reversed_amount") == str(part)
    assert shop.deliver(refund_failed(rng, first[0])) == "held"
    assert decide(shop, "fulfilled") == ("ok", "fulfilled")
    assert shop.field("reversed_amount") == "0"
    later = refund_events(rng, shop.pk, shop.amount, shop.amount)
    assert shop.deliver(later[2]) == "queued"
    later_id = later[2]["data"]["object"]["id"]
    assert reverse_all(shop) == [(later_id, shop.amount, f"reverse:{shop.pk}:{later_id}")]
    assert shop.state() == "reversed"


def test_a_refund_recorded_while_held_for_a_failed_reversed_refund_is_reversed_on_resolve(
    redis, redis_server, rng
) -> None:
    """Before, a partial refund recorded while the payment was held was only recorded, and
    the person's grant left it fulfilled with that refund never reversed."""
    shop = per_refund_shop(redis_server, rng)
    first, _, part = a_partial_refund_reversed(shop)
    assert shop.deliver(refund_failed(rng, first[0])) == "held"
    second = refund_events(rng, shop.pk, shop.amount, part)
    assert shop.deliver(second[2]) == "held"
    assert decide(shop, "fulfilled") == ("ok", "queued")
    second_id = second[2]["data"]["object"]["id"]
    assert reverse_all(shop) == [(second_id, part, f"reverse:{shop.pk}:{second_id}")]


def test_a_refund_failed_during_another_refund_s_reversal_holds_it_when_that_ends(
    redis, redis_server, rng
) -> None:
    shop = per_refund_shop(redis_server, rng)
    events, refund_id, part = a_partial_refund_reversed(shop)
    second = refund_events(rng, shop.pk, shop.amount, part, refunded_before=part)
    assert shop.deliver(second[2]) == "queued"
    assert shop.deliver(refund_failed(rng, events[0])) == "queued"  # its reversal goes on
    assert shop.attempt("reverse") == "held"
    assert shop.field("hold_reason").startswith(f"a refund {refund_id} ({part}) failed after")
    assert redis.hget(keys.STATS, "reinstated") == b"1"


def test_a_refund_failed_during_its_own_reversal_holds_it_when_that_ends(
    redis, redis_server, rng
) -> None:
    shop = per_refund_shop(redis_server, rng)
    events = refund_events(rng, shop.pk, shop.amount, shop.amount // 3)
    assert shop.deliver(events[2]) == "queued"
    assert shop.deliver(refund_failed(rng, events[2])) == "queued"
    assert shop.attempt("reverse") == "held" and shop.field("by_hand") == "1"


def test_held_for_a_failed_reversed_refund_then_a_dispute_lost_reverses_what_remains(
    redis, redis_server, rng
) -> None:
    """Not refunded_unfulfilled (its effect exists): fulfilled as the reversal left it, then
    what remains is reversed."""
    shop = per_refund_shop(redis_server, rng)
    events, _, part = a_partial_refund_reversed(shop)
    assert shop.deliver(refund_failed(rng, events[0])) == "held"
    assert shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "lost")) == "queued"
    assert (shop.field("leg"), shop.field("by_hand")) == ("reverse", "")
    assert reverse_all(shop) == [("", shop.amount - part, f"reverse:{shop.pk}")]
    assert shop.state() == "reversed"


def test_per_refund_reversed_in_full_given_back_and_granted_is_not_held_again(
    redis, redis_server, rng
) -> None:
    """Reversed refund by refund, then one refund failed (reinstate holds it); granted by hand
    (which clears its leg), the failure's next event does not hold it a second time."""
    shop = per_refund_shop(redis_server, rng)
    first = refund_events(rng, shop.pk, shop.amount, shop.amount // 3)
    rest = refund_events(
        rng, shop.pk, shop.amount, shop.amount - shop.amount // 3, refunded_before=shop.amount // 3
    )
    for event in (first[2], rest[2]):
        shop.deliver(event)
    assert len(reverse_all(shop)) == 2 and shop.state() == "reversed"
    assert shop.deliver(refund_failed(rng, rest[2])) == "held"
    assert decide(shop, "fulfilled") == ("ok", "fulfilled")
    assert shop.deliver(refund_failed(rng, rest[0])) == "fulfilled"
    assert redis.hget(keys.STATS, "reinstated") == b"1"


def test_per_refund_a_payment_given_back_then_resolved_is_not_said_taken_back(
    redis, redis_server, rng
) -> None:
    """Found by the explorer (REVERSAL_PER_REFUND): interrupted, its dispute lost and won, a
    refund of part of it; a person finds its effect: the refund's own reversal runs, and the
    payment, fulfilled again, no longer says taken back."""
    shop = Shop(redis_server, rng, REVERSAL_PER_REFUND="true")
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", False)
    assert shop.attempts.mark_calling(shop.pk, start.token)
    shop.attempts.finish(shop.pk, start.token, "interrupted", "died", 1.0)
    for status in ("lost", "won"):
        shop.deliver(dispute_closed(rng, shop.pk, shop.amount, status))
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount // 2):
        shop.deliver(event)
    verdict = shop.attempts.record_decision(shop.pk, "fulfilled", ("interrupted",), "ops:bob")
    assert verdict == ("ok", "queued") and shop.field("leg") == "reverse"
    assert shop.attempt("reverse") == "fulfilled"
    assert shop.field("taken_back") == ""


def test_a_bulk_retry_of_held_payments_leaves_out_those_granted_by_hand(
    redis, redis_server, rng, config, client
) -> None:
    """Its dry run listed them as retryable, and the real run then refused them silently."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    shop.deliver(refund_failed(rng, refunded_in_full(shop)[0]))
    assert shop.state() == "held" and shop.field("by_hand") == "1"
    for dry_run in (True, False):
        bulk = decide_bulk(shop.attempts, "retry", "held", "", "", dry_run, "cli")
        assert (bulk.matched, bulk.payment_keys, bulk.by_hand) == (0, [], 1)
    assert shop.state() == "held"
    said = run_cli(config, "retry", "--state", "held", "--dry-run").stdout
    assert "0 held payment(s) match" in said and "1 more held only for a person" in said, said
    page = client.get("/ops/bulk?action=retry&state=held", headers=BEARER).get_data(as_text=True)
    assert 'id="bulk-by-hand">1 more held only for a person' in page


def test_a_hold_decided_since_shows_as_was_held(redis, redis_server, rng, client) -> None:
    """A person retried a held payment and it was fulfilled: its hold reason stays as
    history, no longer in the red "held" row."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    page_of = f"/ops/payments/{shop.pk}"
    redis.hset(keys.payment(shop.pk), mapping={"state": "held", "hold_reason": "other mode"})
    page = client.get(page_of, headers=BEARER).get_data(as_text=True)
    assert '<tr class="bad"><td class="k">held</td><td id="hold-reason">other mode' in page
    redis.hset(keys.payment(shop.pk), "state", "fulfilled")  # as a retry then its call leave it
    page = client.get(page_of, headers=BEARER).get_data(as_text=True)
    assert '<td class="k">was held</td><td id="hold-reason" class="muted">other mode' in page
    assert '<td class="k">held</td>' not in page


def test_a_refund_failed_after_its_reversal_is_shown_beside_the_taking_back(
    redis, redis_server, rng, config, client
) -> None:
    """ "taken back: refunded in full" sat under "refunded 0.00 of …" (merchant review)."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    events = refunded_in_full(shop)
    assert shop.attempt("reverse") == "reversed"
    assert shop.deliver(refund_failed(rng, events[0])) == "held"
    said = "refunded in full, then a refund failed: refunded 0.00 USD of"
    assert said in " ".join(run_cli(config, "payment", shop.pk).stdout.split())
    page = client.get(f"/ops/payments/{shop.pk}", headers=BEARER).get_data(as_text=True)
    assert said in page
