"""The explorer's machine driven by hand: one effect per purchase tied late, reversals after
the action moved, a fulfilment again withdrawn, and a possible duplicate a person closed
then taken back."""

import pytest

from ledger import keys
from tests.support.processes import RedisServer
from tests.support.protocol.by_hand import machine_by_hand, settling_machine, unpaid_with_takings
from tests.support.protocol.constants import LEASE_MS, PARTS, TALLY
from workers.reversal_target import applied_on


def test_a_purchase_tied_late_has_one_effect(protocol_redis: RedisServer) -> None:
    """A guest's Checkout purchase with an invoice, FULFIL_UNLINKED_INVOICES on: invoice.paid
    fulfilled, then payment_intent.succeeded (no customer: no fingerprint ties it), then the
    session naming both. The PaymentIntent's record must not be called: on the previous main
    it stayed queued after the tie and the worker fulfilled it (two effects)."""
    m = machine_by_hand(protocol_redis, seed=3, replay_safe=True, unlinked=True)
    session, invoice, intent = (len(m.events) - PARTS + part for part in range(3))  # guest's
    m.deliver(invoice)
    m.worker_takes_a_job()
    m.worker_calls(0, "ok", True)
    m.worker_finishes(0)
    m.deliver(intent)
    m.deliver(session)
    m.worker_takes_a_job()
    m.worker_calls(0, "ok", True)
    m.worker_finishes(0)
    m.one_effect_per_purchase()
    held = {pk: m.state(pk) for ids in m.purchases[-3:-2] for pk in ids}
    assert sorted(held.values()) == ["fulfilled", "held"], held
    m.teardown()


@pytest.mark.parametrize("unlinked", [False, True])
def test_a_basil_renewal_tied_after_its_call_has_one_effect(
    protocol_redis: RedisServer, unlinked: bool
) -> None:
    """A renewal (API basil): invoice.paid (pays its own record with FULFIL_UNLINKED_INVOICES),
    the PaymentIntent's paid events, a call, then invoice_payment.paid tying the two records:
    one effect, and the record that called gains the other's invoice and subscription."""
    m = machine_by_hand(protocol_redis, seed=5, replay_safe=False, unlinked=unlinked)
    invoice, intent, charge, tie = (len(m.events) - 4 + part for part in range(4))
    m.deliver(invoice)
    m.deliver(intent)
    m.deliver(charge)
    m.worker_fulfils_the_next_job()
    m.deliver(tie)
    m.worker_takes_a_job()  # nothing more to call
    assert m.workers[0] is None
    m.one_effect_per_purchase()
    ids = m.purchases[-1]
    states = sorted(m.state(pk) for pk in ids)
    assert states == (["fulfilled", "held"] if unlinked else ["fulfilled", "pending"]), states
    (called,) = (pk for pk in ids if m.state(pk) == "fulfilled")
    fields = m.redis.hmget(keys.payment(called), "p_in", "p_sub", "same_purchase_as")
    assert None not in fields, fields
    m.teardown()


def test_a_fulfilment_again_withdrawn_for_a_refund_that_then_failed_is_not_left_reversed(
    protocol_redis: RedisServer,
) -> None:
    """Found by the explorer (seed 808, REVERSAL_DISPUTE_WON=fulfil): a dispute won after its
    reversal, the payment refunded in full before its fulfilment again (withdrawn: reversed),
    then that refund failed. The charge event still said refunded in full, so each event
    began a fulfilment again that its start withdrew: reversed, though Stripe had given it
    back. A failure after the charge event takes its refund off that figure: fulfilled
    again."""
    m = machine_by_hand(
        protocol_redis, seed=638, replay_safe=False, dispute_won="fulfil", threshold=1, reverse=True
    )
    m.dispute_lost_then_won(73)
    m.stripe_takes_back(38)
    m.downstream_refuses_one_payment_alone()  # takes the fulfilment again's job: withdrawn
    given = [pk for pk in m.all_payments() if m.state(pk) == "reversed"]
    m.stripe_gives_back(0)
    m.downstream_refuses_one_payment_alone()
    m.given_back_is_never_left_taken_back()
    assert given and all(m.leg(pk) == "refulfil" for pk in given)
    m.teardown()
    assert all(m.state(pk) == "fulfilled" for pk in given)


@pytest.mark.parametrize("decision", ["requeue", "fulfilled"])
def test_a_reversal_after_the_action_moved_is_held_never_called(
    protocol_redis: RedisServer, decision: str
) -> None:
    """Fulfilled on one downstream, FULFILMENT_ACTION moved, then refunded in full: the
    reversal's job holds it without a call (workers/reversal_target.py). A person's retry
    holds it again; their resolve (taken back by hand) makes it reversed."""
    m = settling_machine(protocol_redis, reverse=True)
    for index, pk, taking in unpaid_with_takings(m):
        m.deliver(index)
        m.worker_fulfils_the_next_job()
        if m.state(pk) == "fulfilled":
            m.the_action_moves()
            for i in taking:
                m.deliver(i)
            break
    assert (m.state(pk), m.leg(pk)) == ("queued", "reverse"), "no reversal due"
    m.worker_runs_a_whole_job("ok", True)
    assert m.state(pk) == "held" and m.reversal_calls[pk] == 0
    m.terminal_stays_terminal_unless_a_person_acts()
    m.person_decides(0, decision)
    if decision == "requeue":
        m.worker_runs_a_whole_job("ok", True)
    assert m.state(pk) == ("held" if decision == "requeue" else "reversed")
    assert m.reversal_calls[pk] == 0
    m.teardown()


def test_a_reversal_taken_before_the_action_moved_is_called_by_its_worker(
    protocol_redis: RedisServer,
) -> None:
    """Found by the explorer: a reversal's job taken while FULFILMENT_ACTION still named the
    downstream of the effect (jobs.py checks it then, by its worker's own settings); the
    action moves (a new deployment), then that worker fences and calls. It calls its own
    REVERSAL_ACTION, the pair of the action it was deployed with, where the effect is: the
    model checked the call against the action's new downstream and said it was misplaced.
    The next reversal's job, taken after the move, is held."""
    m = machine_by_hand(protocol_redis, seed=0, replay_safe=False, reverse=True, per_refund=True)
    m.refunded_in_full_before_its_amount_was_known(index=0, jobs=0)
    pk = next(pk for pk in m.all_payments() if m.leg(pk) == "reverse")
    assert m.state(pk) == "queued" and applied_on(m.redis, pk) == "db:a"
    m.worker_takes_a_job()
    worker = m.workers[0]
    assert worker is not None and worker.leg == "reverse"
    m.the_action_moves(replay_safe=False)
    m.worker_fences(0)
    m.worker_calls(0, "ok", True)
    assert m.reversal_calls[pk] == 1
    m.worker_finishes(0)
    assert (m.state(pk), m.leg(pk)) == ("queued", "reverse"), "its other refund's reversal"
    m.sweeper_runs()  # which queues its job
    m.worker_runs_a_whole_job("ok", True)
    assert m.state(pk) == "held" and m.reversal_calls[pk] == 1
    m.teardown()


@pytest.mark.parametrize("to_replay_safe", [True, False])
def test_a_payment_whose_call_may_have_applied_is_held_when_the_action_moves(
    protocol_redis: RedisServer, to_replay_safe: bool
) -> None:
    """Found by outside reviews: a replay-safe call whose answer never came (it applied on
    the shop's first database), then FULFILMENT_ACTION moved to a second one (replay-safe,
    or the shop's own HTTP API, which is not): the retry was called there, its key new to
    it, and applied again (two effects, and the refund's reversal took back one). It is held
    for a person instead, who finds it applied there: fulfilled, and a reversal would be
    held too (its effect on the first)."""
    m = machine_by_hand(protocol_redis, seed=6, replay_safe=True)
    pk = min(m.purchases[0])
    m.deliver(m.pool_event("payment_intent.succeeded", pk))
    m.worker_runs_a_whole_job("ambiguous", True)  # applied on db:a, no answer
    assert m.state(pk) == "retrying" and m.applied_on[pk] == {"db:a"}
    m.the_action_moves(to_replay_safe)
    m.time_passes(LEASE_MS + 1)
    m.sweeper_runs()
    m.worker_takes_a_job()
    assert m.workers == [None, None] and m.state(pk) == "held"
    assert m.redis.hget(keys.payment(pk), "moved_from") == b"db:a"
    assert m.calls[pk] == 1
    m.person_decides(0, "retry")  # checks db:a as the reason asks: it applied
    assert m.state(pk) == "fulfilled"
    assert applied_on(m.redis, pk) == "db:a"
    m.one_effect_per_payment()
    m.teardown()


def test_a_possible_duplicate_a_person_closed_as_fulfilled_is_held_when_refunded(
    protocol_redis: RedisServer,
) -> None:
    """A PaymentIntent held as a possible duplicate of a Checkout purchase's invoice, closed
    by a person as fulfilled (no call: the effect they vouch for is the invoice's, under its
    key), then refunded in full: held for a person (by hand), never reversed under its own
    key, where there is nothing to take back; once they took the invoice's effect back and
    resolved it, reversed. (It was reversed under its own key: revoke.sql found nothing.)"""
    m = machine_by_hand(
        protocol_redis, seed=111054, replay_safe=True, unlinked=True, reverse=True, per_refund=True
    )
    m.deliver(329)  # the invoice paid
    m.deliver(3516)  # a PaymentIntent's charge, no id tying them
    (pk,) = (p for p in m.all_payments() if m.state(p) == "held")
    other = m.held_as_the_same_purchase_as(pk)
    assert other and other.startswith("in_")
    m.person_decides(0, "fulfilled")
    assert m.state(pk) == "fulfilled" and m.closed_as[pk] == other
    m.stripe_takes_back(99)  # its refund in full
    f = m.redis.hmget(keys.payment(pk), "state", "by_hand", "retake", "effect_of", "hold_reason")
    assert f[:4] == [b"held", b"1", b"refund", other.encode()], f
    assert f"{other}'s (fulfil:{other})" in f[4].decode()
    m.a_payment_closed_as_another_records_is_reversed_only_by_hand()
    m.person_decides(0, "fulfilled")  # they took the invoice's effect back by hand
    assert m.state(pk) == "reversed" and pk in m.taken_back_by_hand
    m.teardown()
    assert m.state(pk) == "reversed" and m.reversal_calls[pk] == 0
    m.a_payment_closed_as_another_records_is_reversed_only_by_hand()


def test_a_closed_duplicate_taken_back_by_the_explorers_rule(protocol_redis: RedisServer) -> None:
    """The rule that walks it: a purchase's invoice, then its PaymentIntent (held), a person
    closes the PaymentIntent, its refund in full (or dispute lost) holds it for a person."""
    for index, lost in ((0, False), (3, True)):  # the guest's untied, the customer's tied late
        m = machine_by_hand(protocol_redis, seed=7, replay_safe=True, unlinked=True, reverse=True)
        m.a_payment_closed_as_another_records_is_taken_back(index, lost)
        assert TALLY["closed_as_another_records_taken_back"] and m.closed_as, index
        (pk,) = m.closed_as
        assert m.state(pk) == "held" and m.reversal_calls[pk] == 0
        tied = m.redis.hget(keys.payment(pk), "same_purchase_as")
        assert (tied is not None) == (index == 3), tied
        m.teardown()
        TALLY.clear()
