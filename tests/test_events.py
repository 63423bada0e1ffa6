"""The one table: which payment an event belongs to and whether it means paid."""

import json

import pytest

from webhook import defaults, samples
from webhook.events import classify

PAID = defaults.PAID_EVENT_TYPES


def sample(event_type: str, **changes: object) -> dict:
    event = json.loads(samples.template(event_type))
    event["data"]["object"].update(changes)
    return event


@pytest.mark.parametrize(
    ("event_type", "changes", "key", "role", "paid"),
    [
        ("payment_intent.created", {}, "pi_000000000000000000000000", "info", False),
        ("payment_intent.succeeded", {}, "pi_000000000000000000000000", "paid", True),
        ("payment_intent.payment_failed", {}, "pi_000000000000000000000000", "failed", False),
        ("charge.succeeded", {}, "pi_000000000000000000000000", "paid", True),
        ("charge.succeeded", {"paid": False}, "pi_000000000000000000000000", "info", False),
        ("charge.failed", {}, "pi_000000000000000000000000", "failed", False),
        ("charge.refunded", {}, None, "refund", False),
        ("checkout.session.completed", {}, "pi_000000000000000000000000", "paid", True),
        (
            "checkout.session.completed",
            {"payment_status": "unpaid"},
            "pi_000000000000000000000000",
            "info",
            False,
        ),
        (
            "checkout.session.completed",
            {"mode": "subscription"},
            "pi_000000000000000000000000",
            "info",
            False,
        ),
        ("invoice.paid", {}, "pi_000000000000000000000000", "paid", True),
        ("invoice.paid", {"payment_intent": None}, "in_000000000000000000000000", "info", False),
    ],
)
def test_mapping(event_type: str, changes: dict, key: str | None, role: str, paid: bool) -> None:
    c = classify(sample(event_type, **changes), PAID)
    assert (c.payment_key, c.role, c.paid) == (key, role, paid)


def test_unlinked_invoices_only_when_configured() -> None:
    event = sample("invoice.paid", payment_intent=None)
    assert classify(event, PAID, unlinked_invoices=True).paid
    assert (
        classify(event, PAID, unlinked_invoices=True).payment_key == "in_000000000000000000000000"
    )


def test_paid_types_are_configurable_and_unknown_types_ignored() -> None:
    assert not classify(sample("charge.succeeded"), ("payment_intent.succeeded",)).paid
    other = {"id": "evt_1", "type": "customer.updated", "data": {"object": {"id": "cus_1"}}}
    assert classify(other, PAID).payment_key is None
