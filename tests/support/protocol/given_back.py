"""Stripe gives payments back and takes them again: a dispute lost then won, a refund that
fails (after its own reversal too), a payment granted again then taken back again."""

import json

import hypothesis.strategies as st
from hypothesis.stateful import precondition, rule

from ledger import keys
from ledger.event_shape import data_object
from tests.support.protocol.constants import PAYING, TAKING, TALLY
from tests.support.protocol.deliveries import StripeDelivers
from tests.support.protocol.ledger_invariants import LedgerInvariants
from tests.support.protocol.whole_jobs import WholeJobs


class StripeGivesBack(StripeDelivers, WholeJobs, LedgerInvariants):
    """Stripe gives back, and takes back again."""

    @rule(index=st.integers(0, 100))
    def dispute_lost_then_won(self, index: int) -> None:
        """One of the pool's disputed payments, paid and fulfilled first (unless it is
        already, or cannot be now), its dispute closed lost, the next jobs run (its reversal,
        or others'), then its dispute closed won: REVERSAL_DISPUTE_WON's paths (held for a
        person, or fulfilled again), racing the reversal when it has not run yet."""
        closing: dict[str, dict[str, int]] = {}
        for i, (e, _) in enumerate(self.events):
            if e["type"] == "charge.dispute.closed":
                obj = e["data"]["object"]
                closing.setdefault(obj["payment_intent"], {})[obj["status"]] = i
        pk = sorted(closing)[index % len(closing)]
        if not self.state(pk) and None in self.workers:
            pay = next(
                i
                for i, (e, _) in enumerate(self.events)
                if e["type"] == PAYING and e["data"]["object"]["id"] == pk
            )
            self.deliver(pay)
            self.worker_fulfils_the_next_job()
        if self.state(pk) != "fulfilled":
            return
        TALLY["disputes_lost_then_won"] += 1
        self.deliver(closing[pk]["lost"])
        for _ in range(2):
            self.terminal_stays_terminal_unless_a_person_acts()  # checked between the parts
            if None in self.workers:
                self.worker_fulfils_the_next_job()
        self.terminal_stays_terminal_unless_a_person_acts()
        self.deliver(closing[pk]["won"])

    @rule(index=st.integers(0, 100))
    def stripe_gives_back(self, index: int) -> None:
        """A payment the ledger settled as taken back (refunded_unfulfilled, reversed) is
        given back by Stripe: its refund fails (the charge events still count it), or its
        dispute is won. Held for a person to grant it, or fulfilled again (a dispute won,
        REVERSAL_DISPUTE_WON=fulfil)."""
        settled = ("refunded_unfulfilled", "reversed")
        done = sorted(pk for pk in self.all_payments() if self.state(pk) in settled)
        if not done:
            return
        pk = done[index % len(done)]
        giving = [
            i
            for i, (e, _) in enumerate(self.events)
            if data_object(e).get("payment_intent") == pk
            and (e["type"] == "refund.failed" or data_object(e).get("status") == "won")
        ]
        if not giving:  # taken back by events made for it alone (a thin payment's)
            return
        TALLY["given_back"] += 1
        self.deliver(giving[index % len(giving)])

    @rule(index=st.integers(0, 100))
    def granted_again_then_taken_back(self, index: int) -> None:
        """A payment reversed, given back and held for a person (by_hand) is granted again by
        them, or one fulfilled again after a dispute won is taken; then Stripe takes it back
        again: one of its taking events not delivered yet (a refund in full, its charge
        event, a dispute lost)."""
        held = sorted(
            pk
            for pk in self.all_payments()
            if self.state(pk) == "held"
            and self.redis.hexists(keys.payment(pk), "reversed_at")
            and self.redis.hget(keys.payment(pk), "by_hand")
            and not self.redis.hexists(keys.payment(pk), "retake")
        )
        if held:
            pk = held[index % len(held)]
            told = self.held_for(pk)
            verdict, _ = self.attempts.record_decision(pk, "fulfilled", ("held",), "person")
            assert verdict == "ok", (pk, verdict)
            self.person_granted(pk, told)
            self.terminal_stays_terminal_unless_a_person_acts()
        again = sorted(pk for pk in self.all_payments() if self.granted_again(pk))
        if not again:
            return
        pk = again[index % len(again)]
        taking = [
            i
            for i, (e, _) in enumerate(self.events)
            if e["type"].startswith(TAKING)
            and data_object(e).get("payment_intent") == pk
            and e["id"] not in self.seen
            and data_object(e).get("status") != "won"
        ]
        if taking:
            TALLY["granted_again_then_taken_back"] += 1
            self.deliver(taking[index % len(taking)])

    @precondition(lambda self: self.per_refund and self.reverse)
    @rule(index=st.integers(0, 100), race=st.booleans(), other_leg=st.booleans())
    def a_reversed_refund_fails(self, index: int, race: bool, other_leg: bool) -> None:
        """REVERSAL_PER_REFUND: a payment paid and fulfilled (unless it is already), its second
        refund alone counted (a partial one) and its reversal due, then that refund fails:
        while its own reversal waits (``race``), once it is done and, ``other_leg``, the first
        refund's reversal is due, or once the payment is fulfilled again."""
        failing = [i for i, (e, _) in enumerate(self.events) if e["type"] == "refund.failed"]
        failed = self.events[failing[index % len(failing)]][0]
        pk, refund_id = data_object(failed)["payment_intent"], data_object(failed)["id"]
        if not self.state(pk) and None in self.workers:
            self.deliver(self.pool_event(PAYING, pk))
            self.worker_fulfils_the_next_job()
        if self.state(pk) != "fulfilled" or self.leg(pk) != "fulfil":
            return
        self.deliver(self.pool_event("refund.updated", pk, id=refund_id))
        for _ in range(0 if race else 3):  # its reversal (or others' jobs first)
            self.terminal_stays_terminal_unless_a_person_acts()  # checked between the parts
            if None in self.workers:
                self.worker_fulfils_the_next_job()
        if other_leg:  # the first refund's
            updated = self.pool_events("refund.updated", pk)
            self.deliver(
                next(i for i in updated if data_object(self.events[i][0])["id"] != refund_id)
            )
        TALLY["reversed_refund_fails"] += 1
        if refund_id in json.loads(self.redis.hget(keys.payment(pk), "rv") or b"{}"):
            TALLY["reversed_refund_fails_after_its_reversal"] += 1
        self.deliver(failing[index % len(failing)])
