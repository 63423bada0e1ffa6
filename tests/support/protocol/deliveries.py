"""Stripe's deliveries: any event of the pool, a success page's session (ledger/landing.py),
and the parts of the purchases whose ties come late."""

import hypothesis.strategies as st
from hypothesis.stateful import rule

from ledger import landing
from tests.support.protocol.constants import PARTS
from tests.support.protocol.model import ProtocolModel


class StripeDelivers(ProtocolModel):
    """Stripe delivers, and the landing page records."""

    @rule(index=st.integers(0, 10_000))
    def deliver(self, index: int) -> None:
        event, body = self.events[index % len(self.events)]
        self.record(self.stripe_delivery(event, body))

    @rule(index=st.integers(0, 10))
    def landing_page_records_its_session(self, index: int) -> None:
        """A success page's POST (ledger/landing.py): the paid session as Stripe's API has
        it, recorded as source ``api`` under ``evt_api_{cs}``, racing the session's own
        event and the rest of the purchase's."""
        sessions = [e for e, _ in self.events if e["type"] == landing.SESSION_EVENT]
        session = sessions[index % len(sessions)]["data"]["object"]
        try:
            delivery = landing.delivery_of(session, "ops:explorer", self.settings)
        except landing.SessionNotPaying:
            return
        answer = self.ledger.record_delivery(delivery)
        first = delivery.event["id"] not in self.seen
        self.seen.setdefault(delivery.event["id"], delivery.body)
        if first and not delivery.classified.hold:
            self.paid.add(answer.payment_key)
        if first and delivery.classified.paid:
            self.paid_by(answer.payment_key, delivery.event)

    @rule(part=st.integers(0, PARTS - 1))
    def deliver_part_of_a_purchase(self, part: int) -> None:
        """The session, invoice.paid or payment_intent.succeeded of a Checkout purchase with
        an invoice, or the invoice.paid, payment_intent.succeeded, charge.succeeded or
        invoice_payment.paid (the tie) of a basil renewal, so late ties are as common as the
        rest (the pool's last PARTS events)."""
        self.deliver(len(self.events) - PARTS + part)

    @rule(part=st.integers(0, 3))
    def deliver_part_of_a_renewal(self, part: int) -> None:
        """The invoice.paid, payment_intent.succeeded, charge.succeeded or invoice_payment.paid
        of a basil renewal (the pool's last four events): its tie comes after both of its
        records exist often enough to be tied late, before and after a call."""
        self.deliver(len(self.events) - 4 + part)
