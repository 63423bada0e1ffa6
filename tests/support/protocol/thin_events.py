"""Payments a thin event paid first (no amount): a worker reading the PaymentIntent from
Stripe's API, and refunds that come before the amount is known."""

import hypothesis.strategies as st
from hypothesis.stateful import precondition, rule

from ledger import keys
from ledger.event_shape import data_object
from ledger.purchase_reads import intent_delivery
from tests.support.protocol.constants import PAYING, TALLY, THIN_PAYING
from tests.support.protocol.deliveries import StripeDelivers
from tests.support.protocol.whole_jobs import WholeJobs


class ThinEvents(StripeDelivers, WholeJobs):
    """Thin paid events and amounts known late."""

    @rule(index=st.integers(0, 10), refund_first=st.booleans(), stale=st.booleans())
    def worker_reads_a_thin_payments_intent(
        self, index: int, refund_first: bool, stale: bool
    ) -> None:
        """A worker, before the gate, reads the PaymentIntent of a payment only its thin event
        paid from Stripe's API and records it (ledger/purchase_reads.py): the payment's
        amount, and refunds recorded meanwhile judged then. A payment not recorded yet is
        paid by its thin event first (and, ``refund_first``, refunded in full by a charge
        event, which says nothing yet without the amount). The worker judged the payment
        (queued or retrying, no leg, no amount) before its read, unleased: ``stale``, its
        record lands after anything else happened to it since (another worker's, a refund, a
        dispute, a person), in whatever state it is now."""
        thin = [i for i, (e, _) in enumerate(self.events) if e["type"] == THIN_PAYING]
        chosen = thin[index % len(thin)]
        pk = self.events[chosen][0]["related_object"]["id"]
        intent = data_object(self.events[self.pool_event(PAYING, pk)][0])
        if not self.state(pk):
            self.deliver(chosen)
            if refund_first:
                paid = intent["amount_received"]
                self.deliver(self.pool_event("charge.refunded", pk, amount_refunded=paid))
        leg, amount = self.redis.hmget(keys.payment(pk), "leg", "amount")
        waiting = self.state(pk) in ("queued", "retrying") and not leg and not amount
        if not (waiting or (stale and pk in self.paid)):
            return
        TALLY["intents_read"] += 1
        self.record(intent_delivery(intent, self.settings))

    @rule(index=st.integers(0, 10), refund_first=st.booleans())
    def paid_by_a_thin_event_first(self, index: int, refund_first: bool) -> None:
        """A payment not recorded yet paid first by its thin event (no amount), then refunded
        in full by a charge event and given its amount by its snapshot paid event, in either
        order, before any worker takes its job."""
        thin = [i for i, (e, _) in enumerate(self.events) if e["type"] == THIN_PAYING]
        chosen = thin[index % len(thin)]
        pk = self.events[chosen][0]["related_object"]["id"]
        if self.state(pk):
            return
        paying = self.pool_event(PAYING, pk)
        paid = data_object(self.events[paying][0])["amount_received"]
        full = self.pool_event("charge.refunded", pk, amount_refunded=paid)
        TALLY["paid_by_a_thin_event_first"] += 1
        for i in (chosen, full, paying) if refund_first else (chosen, paying, full):
            self.deliver(i)

    @precondition(lambda self: None in self.workers)
    @rule(index=st.integers(0, 10), jobs=st.integers(0, 2))
    def refunded_in_full_before_its_amount_was_known(self, index: int, jobs: int) -> None:
        """A payment not recorded yet paid by its thin event (no amount) and fulfilled, then
        refunded in full by its two refunds, ``jobs`` of the next jobs run after each (their
        reversals, REVERSAL_PER_REFUND, with the amount paid not known: done, or still due),
        then given its amount by its snapshot paid event."""
        thin = [i for i, (e, _) in enumerate(self.events) if e["type"] == THIN_PAYING]
        chosen = thin[index % len(thin)]
        pk = self.events[chosen][0]["related_object"]["id"]
        if self.state(pk):
            return
        self.deliver(chosen)
        for _ in range(4):  # its job, behind any queued before it
            if self.state(pk) != "queued" or None not in self.workers:
                break
            self.worker_fulfils_the_next_job()
        if self.state(pk) != "fulfilled":
            return
        TALLY["refunded_before_its_amount"] += 1
        for refund in self.pool_events("refund.created", pk):
            self.deliver(refund)
            for _ in range(jobs):
                if None in self.workers:
                    self.worker_fulfils_the_next_job()
        self.deliver(self.pool_event(PAYING, pk))
