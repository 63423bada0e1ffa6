"""Which parts of a purchase came after the call that fulfilled it (ledger/read/late_parts.py),
from the events' first-recorded times and the attempts' starts alone."""

from datetime import UTC, datetime, timedelta

from ledger.read.late_parts import SESSION_WAITS, came_after_fulfilment, part_of
from ledger.read.timeline import Attempt, PaymentEvent

CALL = datetime(2026, 12, 3, 8, 0, 0, tzinfo=UTC)


def event(n: int, type_: str | None, after_ms: int) -> PaymentEvent:
    return PaymentEvent(
        id=f"evt_{n}",
        expired=type_ is None,
        type=type_,
        role="info",
        pays=False,
        paid_the_payment=False,
        deliveries=None if type_ is None else 1,
        first_recorded_at=None if type_ is None else CALL + timedelta(milliseconds=after_ms),
        last_delivered_at=None,
    )


def attempt(token: int, outcome: str, leg: str = "fulfil") -> Attempt:
    return Attempt(
        token=token,
        outcome=outcome,
        started_at=CALL,
        call_started_at=CALL,
        ended_at=None,
        duration_ms=None,
        call_ms=None,
        error=None,
        late=False,
        phase_at_expiry=None,
        stale_outcome=None,
        stale_at=None,
        caller=None,
        leg=leg,  # type: ignore[arg-type]
    )


def parts(events: list[PaymentEvent], f: dict[str, str] | None = None) -> list[str]:
    return [p.part for p in came_after_fulfilment(events, [attempt(1, "fulfilled")], f or {})]


def test_each_type_brings_its_part() -> None:
    assert [
        part_of(t)
        for t in (
            "checkout.session.completed",
            "checkout.session.retrieved",
            "invoice.paid",
            "invoice_payment.paid",
            "payment_intent.succeeded",
            "charge.succeeded",
            "charge.refund.updated",
            "charge.dispute.created",
            "refund.created",
            "v1.payment_intent.succeeded",
        )
    ] == [
        "checkout_session",
        "checkout_session",
        "invoice",
        None,
        "payment_intent",
        "payment_intent",
        None,
        None,
        None,
        None,
    ]


def test_a_part_is_late_only_when_every_event_of_it_came_after_the_call() -> None:
    paid = [event(1, "charge.succeeded", -5), event(2, "payment_intent.succeeded", 40)]
    assert parts([*paid, event(3, "checkout.session.completed", 90)]) == ["checkout_session"]
    assert parts([*paid, event(3, "checkout.session.completed", -1)]) == []
    assert parts([*paid, event(3, "checkout.session.completed", 0)]) == []  # same ms: not sure
    both = [event(3, "checkout.session.completed", -1), event(4, "checkout.session.x", 9)]
    assert parts([*paid, *both]) == []
    invoice = event(5, "invoice.paid", 30)
    # no PaymentIntent event at all: nothing is said of it
    assert parts([event(1, "checkout.session.completed", -9), invoice]) == ["invoice"]
    assert parts([event(1, "checkout.session.completed", -9), event(2, "charge.succeeded", 3)]) == [
        "payment_intent"
    ]


def test_nothing_is_said_without_certainty() -> None:
    late_session = [event(1, "charge.succeeded", -5), event(3, "checkout.session.completed", 90)]
    assert parts([*late_session, event(4, None, 0)]) == []  # an expired record: unknown
    unfulfilled = came_after_fulfilment(late_session, [attempt(1, "retry")], {})
    settled = came_after_fulfilment(late_session, [attempt(1, "fulfilled", "settle")], {})
    assert unfulfilled == settled == []
    # it waited for the session and the wait ended with one (its event, or Stripe's API)
    assert parts(late_session, {SESSION_WAITS: "2", "p_cs": "cs_1"}) == []


def test_the_note_says_what_the_call_lacked_and_why() -> None:
    session = [event(1, "charge.succeeded", -5), event(3, "checkout.session.completed", 90)]
    [zero] = came_after_fulfilment(session, [attempt(1, "fulfilled")], {})
    assert "the call had no session" in zero.note and "CHECKOUT_WAIT_SECONDS=0" in zero.note
    assert (zero.event_id, zero.fulfilled_by, zero.call_started_at) == ("evt_3", 1, CALL)
    ran_out = {SESSION_WAITS: "3", "p_no_cs": "1", "p_items": "[]"}
    [waited] = came_after_fulfilment(session, [attempt(1, "fulfilled")], ran_out)
    assert "ran out first and Stripe's API had no session" in waited.note
    assert "line items" in waited.note
    [unasked] = came_after_fulfilment(session, [attempt(1, "fulfilled")], {"p_no_cs": "not_asked"})
    assert "ran out first; no STRIPE_API_KEY to ask" in unasked.note
    invoice = [event(1, "payment_intent.succeeded", -5), event(2, "invoice.paid", 7)]
    [lines] = came_after_fulfilment(invoice, [attempt(1, "fulfilled")], {"p_in": "in_1"})
    assert "lines_complete false" in lines.note
    [read] = came_after_fulfilment(invoice, [attempt(1, "fulfilled")], {"p_in_lines_all": "[]"})
    assert "INVOICE_LINES read them" in read.note
