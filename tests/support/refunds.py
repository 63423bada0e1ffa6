"""Refund and dispute events as Stripe sends them for a payment (the fields the ledger
reads: the object's kind, ids, amounts, statuses and its PaymentIntent)."""

import copy
import random
from typing import Any

from ledgerctl import samples


def _event(rng: random.Random, event_type: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": samples.random_id(rng, "evt"),
        "object": "event",
        "api_version": "2024-06-20",
        "created": 1_700_000_000,
        "livemode": False,
        "type": event_type,
        "data": {"object": obj},
    }


def refund(
    rng: random.Random, pi: str, amount: int, refund_id: str, status: str = "succeeded"
) -> dict[str, Any]:
    return {
        "id": refund_id,
        "object": "refund",
        "amount": amount,
        "currency": "usd",
        "payment_intent": pi,
        "charge": "ch_" + pi.removeprefix("pi_"),
        "status": status,
    }


def refund_events(
    rng: random.Random, pi: str, paid: int, amount: int, refunded_before: int = 0
) -> list[dict[str, Any]]:
    """One refund of ``amount`` as its three events: ``refund.created``, ``charge.refunded``
    (the charge with ``amount_refunded`` and the refund listed) and ``refund.updated``."""
    refund_id = samples.random_id(rng, "re")
    created = refund(rng, pi, amount, refund_id, "pending")
    charge = {
        "id": "ch_" + pi.removeprefix("pi_"),
        "object": "charge",
        "amount": paid,
        "amount_refunded": refunded_before + amount,
        "currency": "usd",
        "payment_intent": pi,
        "refunded": refunded_before + amount >= paid,
        "refunds": {"object": "list", "data": [refund(rng, pi, amount, refund_id)]},
    }
    return [
        _event(rng, "refund.created", created),
        _event(rng, "charge.refunded", charge),
        _event(rng, "refund.updated", refund(rng, pi, amount, refund_id)),
    ]


def dispute_closed(rng: random.Random, pi: str, amount: int, status: str) -> dict[str, Any]:
    """The close of the payment's one dispute (its id from ``pi``): lost, then won, is that
    dispute won after it was lost. A random id is drawn still, unused, so that a seeded
    pool of events (the protocol explorer's pinned programs) stays as it was."""
    samples.random_id(rng, "dp")
    return dispute_event(rng, pi, amount, status, "charge.dispute.closed", "dp_" + pi[3:])


def dispute_event(
    rng: random.Random,
    pi: str,
    amount: int,
    status: str,
    event_type: str,
    dispute_id: str | None = None,
) -> dict[str, Any]:
    """A ``charge.dispute.*`` event of dispute ``dispute_id`` (a new one when None)."""
    obj = {
        "id": dispute_id or samples.random_id(rng, "dp"),
        "object": "dispute",
        "amount": amount,
        "currency": "usd",
        "payment_intent": pi,
        "charge": "ch_" + pi.removeprefix("pi_"),
        "status": status,
    }
    return _event(rng, event_type, obj)


def refund_failed(rng: random.Random, refund_event: dict[str, Any]) -> dict[str, Any]:
    """``refund.failed`` for the refund a ``refund.*`` event of ``refund_events`` carries, a
    day after it: the money went back to the merchant (the charge's earlier
    ``amount_refunded`` still counts it)."""
    obj = copy.deepcopy(refund_event["data"]["object"])
    obj["status"] = "failed"
    event = _event(rng, "refund.failed", obj)
    event["created"] = refund_event.get("created", 1_700_000_000) + 86_400  # days later
    return event
