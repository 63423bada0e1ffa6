"""Stripe takes payments back: refunds and disputes, before, during and after fulfilment,
after a call with no answer, and of a payment a person closed as another record's."""

import random

import hypothesis.strategies as st
from hypothesis.stateful import precondition, rule

from ledger import keys
from ledger.event_shape import data_object
from tests.support.protocol.constants import PAYING, PERSON_STATES, TAKING, TALLY
from tests.support.protocol.deliveries import StripeDelivers
from tests.support.protocol.persons import Persons
from tests.support.protocol.whole_jobs import WholeJobs
from tests.support.refunds import dispute_closed, dispute_event, refund_events

DAY = 86_400


class StripeTakesBack(StripeDelivers, WholeJobs, Persons):
    """Stripe takes back (refunds, disputes lost)."""

    @rule(index=st.integers(0, 100))
    def stripe_takes_back(self, index: int) -> None:
        """A refund's event (in full or partial) or a dispute closed lost or won, so they come
        as often as the other steps, before, during and after fulfilment."""
        taking = [i for i, (e, _) in enumerate(self.events) if e["type"].startswith(TAKING)]
        self.deliver(taking[index % len(taking)])

    @rule(index=st.integers(0, 100), later=st.booleans())
    def a_dispute_opens(self, index: int, later: bool) -> None:
        """An event of one of the pool's lost disputes before its close (so it may come
        after it): created, or its funds withdrawn a minute later by its ``created``, in
        either order; a copy when drawn again."""
        lost = [e for e, _ in self.events if data_object(e).get("status") == "lost"]
        o = data_object(lost[index % len(lost)])
        kind = "funds_withdrawn" if later else "created"
        event = dispute_event(
            random.Random(index * 2 + later),
            o["payment_intent"],
            o["amount"],
            "needs_response",
            f"charge.dispute.{kind}",
            o["id"],
        )
        event["created"] += 60 if later else 0
        self.record(self.stripe_delivery(event))

    @rule(index=st.integers(0, 100), close=st.booleans())
    def an_inquiry_before_its_chargeback(self, index: int, close: bool) -> None:
        """An inquiry of one of the pool's disputed payments, a dispute of its own a day or two
        before the chargeback: opened, or closed without one (``warning_closed``), in any
        order with the chargeback's events (a redelivery, reconcile's newest-first replay).
        It takes nothing back, never gives back what the chargeback's loss took, and shows
        open only until its own close."""
        lost = [e for e, _ in self.events if data_object(e).get("status") == "lost"]
        o = data_object(lost[index % len(lost)])
        pi = o["payment_intent"]
        event = dispute_event(
            random.Random(index * 2 + close),
            pi,
            o["amount"],
            "warning_closed" if close else "warning_needs_response",
            "charge.dispute.closed" if close else "charge.dispute.created",
            "dp_inquiry_" + pi[3:],
        )
        event["created"] -= DAY if close else 2 * DAY
        TALLY["inquiries"] += 1
        self.record(self.stripe_delivery(event))

    @rule(index=st.integers(0, 100))
    def stripe_takes_back_an_effect(self, index: int) -> None:
        """A payment is paid and fulfilled (unless one already is), then one of its refund or
        dispute events comes: reversals due, racing their own copies, the sweeper, workers
        and a person, as often as fulfilment."""
        done = sorted(pk for pk in self.all_payments() if self.state(pk) == "fulfilled")
        if not done and None in self.workers:
            paying = [i for i, (e, _) in enumerate(self.events) if e["type"] == PAYING]
            self.deliver(paying[index % len(paying)])
            self.worker_fulfils_the_next_job()
            done = sorted(pk for pk in self.all_payments() if self.state(pk) == "fulfilled")
        taking = [
            i
            for i, (e, _) in enumerate(self.events)
            if e["type"].startswith(TAKING) and e["data"]["object"].get("payment_intent") in done
        ]
        if taking:
            self.deliver(taking[index % len(taking)])

    @precondition(lambda self: None in self.workers)
    @rule(index=st.integers(0, 100), hit=st.booleans(), all_events=st.booleans())
    def taken_back_after_an_answer_never_came(
        self, index: int, hit: bool, all_events: bool
    ) -> None:
        """A payment is paid, its attempt's call gets no answer (it applied or not: ``hit``),
        then Stripe takes it back: a replay-safe action that settles settles it (its key
        found, or voided), any other holds it for a person, or it goes interrupted; one of
        its taking events, or all of them (a full refund's three, a dispute). Held with no
        effect (not ``hit``), a person may look and say so (person_finds_nothing_applied)."""
        paying = [i for i, (e, _) in enumerate(self.events) if e["type"] == PAYING]
        self.deliver(paying[index % len(paying)])
        slot = self.workers.index(None)
        self.worker_takes_a_job()
        w = self.workers[slot]
        if w is None:
            return
        self.worker_fences(slot)
        self.worker_calls(slot, "ambiguous", hit)
        self.worker_finishes(slot)
        taking = [
            i
            for i, (e, _) in enumerate(self.events)
            if e["type"].startswith(TAKING)
            and e["data"]["object"].get("payment_intent") == w.payment
        ]
        if not taking:
            return
        for i in taking if all_events else taking[index % len(taking) :][:1]:
            self.deliver(i)
        if self.leg(w.payment) == "settle":
            TALLY["settles_begun"] += 1
        if not hit and index % 2 and self.held_after_refund(w.payment):
            self.not_applied_by_a_person(w.payment)  # looked, and found nothing

    @rule(index=st.integers(0, 100), lost=st.booleans())
    def a_payment_closed_as_another_records_is_taken_back(self, index: int, lost: bool) -> None:
        """A Checkout purchase's invoice and PaymentIntent are paid before its session (the
        PaymentIntent held as the invoice's possible duplicate; the session may tie them
        late), a person closes the held one as fulfilled (no call: its purchase's effect is
        the other record's), then it is refunded in full or its dispute is lost: never
        reversed under its own key (it has no effect there), held for a person to take the
        other record's effect back by hand."""
        closed = sorted(pk for pk in self.closed_as if pk.startswith("pi_"))
        if not closed:
            part = 3 * (index % 2)  # the guest's purchase, or the customer's
            for i in (part + 1, part + 2, part)[: 2 + index // 2 % 2]:  # invoice, intent, session
                self.deliver_part_of_a_purchase(i)
            held = [pk for pk in self.all_payments() if self.held_as_the_same_purchase_as(pk)]
            for pk in sorted(held):
                if pk.startswith("pi_") and not self.redis.hexists(keys.payment(pk), "by_hand"):
                    waiting = sorted(
                        p for p in self.all_payments() if self.state(p) in PERSON_STATES
                    )
                    self.person_decides(waiting.index(pk), "fulfilled")
            closed = sorted(pk for pk in self.closed_as if pk.startswith("pi_"))
        taken = [pk for pk in closed if self.state(pk) == "fulfilled" and pk in self.amounts]
        if not taken:
            return
        pk = taken[index % len(taken)]
        rng, paid = random.Random(index), self.amounts[pk]
        lost_it = [dispute_closed(rng, pk, paid, "lost")]
        for event in lost_it if lost else refund_events(rng, pk, paid, paid):
            self.record(self.stripe_delivery(event))
        f = self.redis.hmget(keys.payment(pk), "state", "by_hand", "retake", "effect_of")
        if self.reverse and self.taken_back_now(pk):
            assert f[0] == b"held" and f[1] and f[2], f"{pk}: closed, taken back: {f}"
            assert f[3] == self.closed_as[pk].encode(), f"{pk}: its effect is under {f[3]!r}"
            holder = self.effect_holder(pk, self.closed_as[pk])  # the key the reason names
            said = f"{holder}'s (fulfil:{holder})" if holder else "no record of its purchase is"
            reason = (self.redis.hget(keys.payment(pk), "hold_reason") or b"").decode()
            assert said in reason, (pk, reason)
            TALLY["closed_as_another_records_taken_back"] += 1
