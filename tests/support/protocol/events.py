"""The events a program delivers: every type of the event table for a few payments, with
their refunds, disputes and late ties (``event_pool``)."""

import copy
import json
import random
from typing import Any

from ledger import landing
from ledgerctl import samples
from tests.integration.test_thin_events import payment_intent, thin_event
from tests.support.helpers import basil_renewal, purchase
from tests.support.protocol.constants import THIN_PAYING
from tests.support.refunds import dispute_closed, refund_events, refund_failed

# Every other type of the event table, as (shipped sample it is shaped like, type).
OTHER_TYPES = (
    ("charge.succeeded", "charge.captured"),
    ("charge.failed", "charge.failed"),
    ("charge.refunded", "charge.refunded"),
    ("charge.refunded", "charge.dispute.created"),
    ("payment_intent.payment_failed", "payment_intent.payment_failed"),
    ("payment_intent.succeeded", "payment_intent.canceled"),
    ("payment_intent.succeeded", "payment_intent.amount_capturable_updated"),
    ("checkout.session.completed", "checkout.session.async_payment_succeeded"),
    ("checkout.session.completed", "checkout.session.async_payment_failed"),
    ("checkout.session.completed", "checkout.session.expired"),
    ("invoice.paid", "invoice.paid"),
    ("invoice.paid", "invoice.payment_succeeded"),
    ("invoice.paid", "invoice.payment_failed"),
)


def event_pool(
    rng: random.Random, one_customer: bool = False
) -> tuple[list[tuple[dict[str, Any], bytes]], list[frozenset[str]]]:
    """Every paid and non-paid type of the event table, for two payments, each with two
    refunds that together refund it in full (three events each; the second's
    ``charge.refunded`` lists both, and a copy of it under another id lists none, as API
    versions since 2022-11-15 send it), the second's ``refund.failed`` (the charge events
    still count it) and a dispute closed lost and won; a copy of
    one paid event under the same id but other bytes (it names another PaymentIntent); and
    two Checkout purchases with an invoice (a guest's and a customer's: invoice.paid without
    its PaymentIntent, tied to it only by the session, in any order) and a basil renewal
    (tied only by invoice_payment.paid). Also the ids of each purchase. With
    ``one_customer`` the two payments' sessions name the same customer."""
    pool = []
    purchases = []
    customers: list[object] = []
    for _ in range(2):
        events = samples.payment_events(rng, checkout=True)
        pi = events[0]["data"]["object"]["id"]
        session = next(e for e in events if e["type"] == landing.SESSION_EVENT)["data"]["object"]
        customers.append(session["customer"])
        if one_customer:
            session["customer"] = customers[0]
        for shape, event_type in OTHER_TYPES:
            extra = samples.event_of_type(rng, shape)
            extra["type"] = event_type
            field = "id" if shape.startswith("payment_intent") else "payment_intent"
            extra["data"]["object"][field] = pi
            events.append(extra)
        paid = int(events[2]["data"]["object"]["amount_received"])
        first = refund_events(rng, pi, paid, paid // 3)  # partial: its three events
        rest = refund_events(rng, pi, paid, paid - paid // 3, refunded_before=paid // 3)
        rest[1]["data"]["object"]["refunds"]["data"].insert(0, first[2]["data"]["object"])
        unlisted = copy.deepcopy(rest[1])  # charge.refunded without its refunds listed
        unlisted["id"] = samples.random_id(rng, "evt")
        del unlisted["data"]["object"]["refunds"]
        events += first + rest + [unlisted, refund_failed(rng, rest[2])]
        events += [dispute_closed(rng, pi, paid, status) for status in ("lost", "won")]
        events.append(thin_event(rng, THIN_PAYING, payment_intent(pi)))
        pool += [(e, samples.encode(e)) for e in events]
        purchases.append(frozenset({pi}))
    twin = json.loads(pool[2][1])
    twin["data"]["object"]["id"] = samples.random_id(rng, "pi")
    pool.append((twin, samples.encode(twin)))
    purchases.append(frozenset({twin["data"]["object"]["id"]}))
    for guest in (True, False):
        session, invoice, intent = purchase(rng, samples.random_id(rng, "cus"), guest)
        pool += [(e, samples.encode(e)) for e in (session, invoice, intent)]
        purchases.append(
            frozenset({intent["data"]["object"]["id"], invoice["data"]["object"]["id"]})
        )
    # A subscription's renewal (API basil): its invoice and PaymentIntent tied only by
    # invoice_payment.paid, which may come before, between or after their paid events.
    renewal = basil_renewal(rng, samples.random_id(rng, "cus"))
    pool += [(e, samples.encode(e)) for e in renewal]
    purchases.append(
        frozenset({renewal[1]["data"]["object"]["id"], renewal[0]["data"]["object"]["id"]})
    )
    return pool, purchases
