"""Rules of the persons who run the service: decide on a payment that waits for them
(webhook-ledger resolve and retry), say a held payment's effect was not applied, pause and
resume fulfilment."""

import hypothesis.strategies as st
from hypothesis.stateful import rule

from ledger import keys
from tests.support.protocol.constants import PERSON_STATES, TALLY
from tests.support.protocol.model import ProtocolModel


class Persons(ProtocolModel):
    """A person's decisions, as webhook-ledger makes them."""

    @rule(index=st.integers(0, 100), decision=st.sampled_from(("retry", "fulfilled", "requeue")))
    def person_decides(self, index: int, decision: str) -> None:
        payments = sorted(pk for pk in self.all_payments() if self.state(pk) in PERSON_STATES)
        if not payments:
            return
        pk = payments[index % len(payments)]
        if self.state(pk) == "held" and self.possible_duplicate_of_its_purchase(pk):
            decision = "fulfilled"  # checked as the hold reason asks: the same purchase
        leg, refund = self.leg(pk), self.reversal_refund(pk)  # the leg the person decides on
        by_hand = self.state(pk) == "held" and self.redis.hexists(keys.payment(pk), "by_hand")
        retake = by_hand and self.redis.hexists(keys.payment(pk), "retake")
        told = self.held_for(pk)
        other = self.held_as_the_same_purchase_as(pk)
        if decision == "requeue":  # webhook-ledger retry
            verdict, _ = self.attempts.record_decision(pk, "retry", ("failed", "held"), "person")
        else:  # webhook-ledger resolve --fulfilled | --retry | --not-applied
            if self.state(pk) == "interrupted" or self.held_after_refund(pk):
                decision = "fulfilled" if self.effect_shows(pk) else "retry"  # checked first
                if decision == "retry" and self.held_after_refund(pk) and not by_hand:
                    # or says so, while Stripe still takes it back (given back since: retried)
                    taken = self.taken_back_now(pk)
                    decision = "not_applied" if index % 2 and taken else decision
            elif self.state(pk) == "held" and self.redis.hexists(keys.payment(pk), "moved_from"):
                where = self.refulfil_applied_on if leg == "refulfil" else self.applied_on
                decision = "fulfilled" if where.get(pk) else "retry"  # checked there
            verdict, _ = self.attempts.record_decision(
                pk, decision, ("interrupted", "held"), "person"
            )
            if decision == "not_applied":  # held after it was taken back, nothing found
                TALLY[f"not_applied_{verdict}"] += 1
                ended = self.state(pk) == "refunded_unfulfilled" or self.redis.hexists(
                    keys.payment(pk), "by_hand"
                )
                assert verdict == "wait" or (verdict == "ok" and ended), (pk, verdict)
        if by_hand:  # given back: granted by the person, never run again by the ledger
            assert verdict == ("ok" if decision == "fulfilled" else "by_hand"), (pk, verdict)
            if verdict == "ok" and retake:  # taken back by hand: reversed
                assert self.state(pk) == "reversed", (pk, self.state(pk))
                self.person_acted.add(pk)
                self.taken_back_by_hand.add(pk)
                self.refulfil_maybe_applied.discard(pk)  # the person took back what applied
            elif verdict == "ok":
                self.person_granted(pk, told)
            return
        if verdict == "ok":
            self.person_acted.add(pk)
            if decision == "fulfilled" and leg == "fulfil":
                self.resolved_done.add(pk)
                if other:
                    self.closed_as[pk] = other
            if decision == "fulfilled" and leg == "reverse":
                self.person_reversed.add(pk)
            if leg == "reverse":
                self.reversal_maybe_applied.discard((pk, refund))
            elif leg == "refulfil":
                self.refulfil_maybe_applied.discard(pk)
            else:
                self.maybe_applied.discard(pk)  # the person saw nothing applied, or closed it

    def effect_shows(self, pk: str) -> bool:
        """What a person finds on the downstream: the reversal's effect while one is due, a
        fulfilment again's while that is, else the fulfilment's."""
        if self.leg(pk) == "reverse":
            return self.reversals_applied[(pk, self.reversal_refund(pk))] > 0
        if self.leg(pk) == "refulfil":
            return self.refulfils_applied[pk] > 0
        return self.applied[pk] > 0

    @rule(index=st.integers(0, 100))
    def person_finds_nothing_applied(self, index: int) -> None:
        """A person looks where a held payment's calls went and finds no effect (the model
        knows none exists: none applied, none found or granted by a person): they say so
        (resolve --not-applied). Taken for one held after it was taken back (not by hand, no
        leg due): refunded_unfulfilled (held to grant by hand if Stripe gave it back at the
        lower bound), never reversed; refused for any other, nothing changed."""
        held = sorted(pk for pk in self.all_payments() if self.state(pk) == "held")
        if held:
            self.not_applied_by_a_person(held[index % len(held)])

    def not_applied_by_a_person(self, pk: str) -> None:
        """person_finds_nothing_applied, for payment ``pk``."""
        had = self.applied[pk] or self.refulfils_applied[pk] or pk in self.closed_as
        if had or pk in self.resolved_done | self.granted_by_hand | self.taken_back_by_hand:
            return  # an effect there: a person who looks finds it
        f = self.redis.hmget(keys.payment(pk), "by_hand", "leg")
        taken = f == [None, None] and self.taken_back_now(pk)
        before = self.payment_core(pk)
        verdict, state = self.attempts.record_decision(
            pk, "not_applied", ("interrupted", "held"), "person"
        )
        TALLY[f"not_applied_{verdict}"] += 1
        if verdict != "ok":
            assert verdict in ("not_taken_back", "wait"), (pk, verdict)
            assert not taken or verdict == "wait", f"{pk}: held after taken back, refused"
            assert self.payment_core(pk) == before, f"{pk}: refused, yet changed"
            return
        assert taken, f"{pk}: not applied taken, though not held after it was taken back"
        by_hand = self.redis.hexists(keys.payment(pk), "by_hand")
        assert state == "refunded_unfulfilled" or (state == "held" and by_hand), (pk, state)
        self.person_acted.add(pk)
        self.maybe_applied.discard(pk)

    @rule(pause=st.booleans())
    def person_pauses_or_resumes(self, pause: bool) -> None:
        if pause:
            self.gate.pause("person", "model")
        else:
            self.gate.resume("person")
