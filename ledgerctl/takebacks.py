"""Refunds and disputes of generated payments, as Stripe sends them, and what a client that
sent them expects (the replay script and the soak; docs/REVERSAL.md).

The events are built from real test-mode payloads (``sample_events/charge.refunded.json``
and ``charge.refund.updated.json``: a Charge with its refunds listed, a Refund); a Dispute
has no shipped copy and carries the fields of Stripe's Dispute object. Each payment gets one
kind of take-back, by its index (so every kind comes in a run of six):

- ``none``: nothing taken back;
- ``full``: one refund of the whole amount (``refund.created`` pending, ``charge.refunded``,
  ``refund.updated`` succeeded);
- ``partial``: one refund of part of it (recorded, nothing reversed);
- ``partials``: two refunds adding up to the amount (the second makes it refunded in full);
- ``dispute_lost``: ``charge.dispute.created``, ``funds_withdrawn``, ``closed`` lost;
- ``dispute_won``: ``charge.dispute.created``, ``funds_withdrawn``, ``funds_reinstated``,
  ``closed`` won (nothing taken back).

Two kinds are only sent when asked for (``OTHER_KINDS``, the replay's ``--refund-kinds``):

- ``dispute_lost_won``: the events of ``dispute_lost`` now and, once the payment is settled
  (its effect reversed), the same dispute won (:func:`won_later`: ``funds_reinstated`` and
  ``closed`` won, 30 days on): with REVERSAL_DISPUTE_WON=fulfil the payment is fulfilled
  again once (a re-grant), else held for a person;
- ``full_failed``: the events of ``full`` now and, once the payment is settled (reversed,
  or refunded before any effect), that refund failed (:func:`failed_later`:
  ``refund.failed`` and ``charge.refund.updated``, a week on): held for a person.

:func:`taken_back` reads the events a client had acknowledged, independently of the
ledger's own code, into which payments Stripe took back: refunded in full (the refunds by
id, a failed one counting nothing, or a charge's ``amount_refunded``) or a dispute lost.

:func:`won_after_loss` reads which payments' disputes were closed lost and then won, and
:func:`given_back_by_refund` which payments a refund in full took back until it failed.
"""

import json
import random
from dataclasses import dataclass, field
from typing import Any

from ledgerctl import samples

KINDS = ("none", "full", "partial", "partials", "dispute_lost", "dispute_won")
"""The kinds each payment gets in turn by default."""
OTHER_KINDS = ("dispute_lost_won", "full_failed")
WON_LATER_S = 30 * 86400
"""How long after its loss a dispute lost then won is closed again, won."""
FAILED_LATER_S = 7 * 86400
"""How long after it succeeded a refund that fails is said to have failed (the customer's
bank refused it: a closed or expired card)."""
Event = dict[str, Any]


def _event(rng: random.Random, event_type: str, obj: dict[str, Any], created: int) -> Event:
    event = json.loads(samples.template("charge.refund.updated"))
    event.update(
        id=samples.random_id(rng, "evt"),
        type=event_type,
        created=created,
        data={"object": obj, "previous_attributes": {}},
        request={"id": samples.random_id(rng, "req", 14), "idempotency_key": None},
    )
    return event


def _refund(charge: dict[str, Any], refund_id: str, amount: int, status: str) -> dict[str, Any]:
    refund = json.loads(samples.template("charge.refund.updated"))["data"]["object"]
    refund.update(
        id=refund_id,
        amount=amount,
        charge=charge["id"],
        currency=charge["currency"],
        created=charge["created"],
        metadata={},
        payment_intent=charge["payment_intent"],
        status=status,
    )
    return refund


def refund_events(
    rng: random.Random, charge: dict[str, Any], amount: int, before: list[dict[str, Any]]
) -> list[Event]:
    """One refund of ``amount`` of ``charge`` (a Charge object, as ``charge.succeeded``
    carries it) after the refunds ``before`` (Refund objects, appended to): its three
    events, in the order Stripe sends them."""
    refund_id = samples.random_id(rng, "re")
    at = int(charge["created"]) + 60 * (len(before) + 1)
    before.append(_refund(charge, refund_id, amount, "succeeded"))
    refunded = sum(int(r["amount"]) for r in before)
    listed = json.loads(samples.template("charge.refunded"))["data"]["object"]
    listed.update(
        {k: charge[k] for k in ("id", "amount", "amount_captured", "currency", "payment_intent")}
    )
    listed.update(
        created=charge["created"],
        amount_refunded=refunded,
        refunded=refunded >= int(charge["amount"]),
        refunds={
            "object": "list",
            "data": list(reversed(before)),
            "has_more": False,
            "total_count": len(before),
            "url": f"/v1/charges/{charge['id']}/refunds",
        },
    )
    return [
        _event(rng, "refund.created", _refund(charge, refund_id, amount, "pending"), at),
        _event(rng, "charge.refunded", listed, at),
        _event(rng, "refund.updated", before[-1], at + 1),
    ]


def dispute_events(rng: random.Random, charge: dict[str, Any], status: str) -> list[Event]:
    """A dispute of the whole charge, from its opening to its close as ``lost`` or ``won``."""
    at = int(charge["created"]) + 86400
    dispute = {
        "id": samples.random_id(rng, "dp"),
        "object": "dispute",
        "amount": charge["amount"],
        "balance_transactions": [],
        "charge": charge["id"],
        "created": at,
        "currency": charge["currency"],
        "evidence": {},
        "evidence_details": {"due_by": at + 7 * 86400, "has_evidence": False, "past_due": False},
        "is_charge_refundable": False,
        "livemode": False,
        "metadata": {},
        "payment_intent": charge["payment_intent"],
        "reason": "fraudulent",
        "status": "needs_response",
    }
    steps = [("charge.dispute.created", "needs_response")]
    steps.append(("charge.dispute.funds_withdrawn", "needs_response"))
    if status == "won":
        steps.append(("charge.dispute.funds_reinstated", "won"))
    steps.append(("charge.dispute.closed", status))
    return [
        _event(rng, event_type, {**dispute, "status": now}, at + n)
        for n, (event_type, now) in enumerate(steps)
    ]


def for_payment(rng: random.Random, events: list[Event], kind: str) -> list[Event]:
    """The take-back events of ``kind`` for one generated payment's events."""
    charge = next(e for e in events if e["type"] == "charge.succeeded")["data"]["object"]
    amount = int(charge["amount"])
    before: list[dict[str, Any]] = []
    if kind in ("full", "full_failed"):
        return refund_events(rng, charge, amount, before)
    if kind == "partial":
        return refund_events(rng, charge, amount // 4, before)
    if kind == "partials":
        first = refund_events(rng, charge, amount // 2, before)
        return first + refund_events(rng, charge, amount - amount // 2, before)
    if kind == "dispute_lost_won":
        return dispute_events(rng, charge, "lost")
    if kind.startswith("dispute_"):
        return dispute_events(rng, charge, kind.removeprefix("dispute_"))
    return []


def later_for_payment(rng: random.Random, sent: list[Event], kind: str) -> list[Event]:
    """What ``kind`` sends once the events :func:`for_payment` gave (``sent``) are settled:
    for ``dispute_lost_won``, its dispute won; for ``full_failed``, its refund failed; else
    nothing."""
    if kind == "dispute_lost_won":
        return won_later(rng, sent)
    return failed_later(rng, sent) if kind == "full_failed" else []


def won_later(rng: random.Random, lost: list[Event]) -> list[Event]:
    """The dispute of ``lost`` (its events, the last ``charge.dispute.closed`` lost) won after
    all: ``charge.dispute.funds_reinstated`` and ``charge.dispute.closed`` with status won,
    the same dispute, ``WON_LATER_S`` after its loss."""
    closed = lost[-1]
    at = int(closed["created"]) + WON_LATER_S
    dispute = {**closed["data"]["object"], "status": "won"}
    return [
        _event(rng, event_type, dispute, at + n)
        for n, event_type in enumerate(("charge.dispute.funds_reinstated", "charge.dispute.closed"))
    ]


def failed_later(rng: random.Random, refunded: list[Event]) -> list[Event]:
    """The refund of ``refunded`` (its events, the last ``refund.updated`` succeeded) failed
    after all: ``refund.failed`` and ``charge.refund.updated``, the same refund with status
    failed, its reason and the balance transaction giving the money back to the merchant,
    ``FAILED_LATER_S`` after it succeeded."""
    succeeded = refunded[-1]
    at = int(succeeded["created"]) + FAILED_LATER_S
    refund = succeeded["data"]["object"]
    failed = {
        **refund,
        "status": "failed",
        "failure_reason": "expired_or_canceled_card",
        "failure_balance_transaction": samples.random_id(rng, "txn"),
    }
    events = [_event(rng, "refund.failed", dict(failed), at)]
    events.append(_event(rng, "charge.refund.updated", dict(failed), at + 1))
    events[1]["data"]["previous_attributes"] = {"status": refund["status"]}
    return events


def kind_of(index: int, kinds: tuple[str, ...] = KINDS) -> str:
    return kinds[index % len(kinds)]


@dataclass
class _Seen:
    """What a client's refund and dispute events say, per payment (PaymentIntent)."""

    paid: dict[str, int] = field(default_factory=dict)
    refunds: dict[str, dict[str, int]] = field(default_factory=dict)
    charged: dict[str, int] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    disputed: set[str] = field(default_factory=set)
    closed: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    """Per payment, each ``charge.dispute.closed``'s (created, status)."""

    def counted(self, pi: str) -> list[int]:
        return [a for a in self.refunds.get(pi, {}).values() if a > 0]

    def refunded_in_full(self, pi: str) -> bool:
        refunded = max(sum(self.counted(pi)), self.charged.get(pi, 0))
        return pi in self.paid and refunded >= self.paid[pi]


def _seen(events: list[Event]) -> _Seen:
    seen = _Seen()
    for event in events:
        obj = event["data"]["object"]
        pi, kind = obj.get("payment_intent"), event["type"]
        if not isinstance(pi, str):
            continue
        if kind == "charge.succeeded":
            seen.paid[pi] = int(obj["amount"])
        elif obj.get("object") == "refund":
            _count(seen.refunds.setdefault(pi, {}), obj)
        elif kind == "charge.refunded":
            seen.charged[pi] = max(seen.charged.get(pi, 0), int(obj.get("amount_refunded") or 0))
            for refund in obj.get("refunds", {}).get("data", []):
                _count(seen.refunds.setdefault(pi, {}), refund)
        elif kind.startswith("charge.dispute."):
            seen.disputed.add(pi)
            if kind == "charge.dispute.closed" and obj.get("status") == "lost":
                seen.lost.add(pi)
            if kind == "charge.dispute.closed":
                closing = (int(event.get("created") or 0), str(obj.get("status")))
                seen.closed.setdefault(pi, []).append(closing)
    return seen


def taken_back(events: list[Event]) -> dict[str, bool]:
    """Payment key (PaymentIntent) -> whether these events take it back, for every payment
    they refund or dispute; the amount paid is read from its ``charge.succeeded``."""
    seen = _seen(events)
    keys = set(seen.refunds) | set(seen.charged) | seen.lost | seen.disputed
    return {pi: pi in seen.lost or seen.refunded_in_full(pi) for pi in sorted(keys)}


def won_after_loss(events: list[Event]) -> set[str]:
    """The payments (PaymentIntents) whose dispute was closed lost and later (by the events'
    ``created``) closed won: taken back, then won (REVERSAL_DISPUTE_WON says what follows)."""
    won = set()
    for pi, closings in _seen(events).closed.items():
        statuses = [status for _, status in sorted(closings)]
        if statuses[-1] == "won" and "lost" in statuses:
            won.add(pi)
    return won


def given_back_by_refund(events: list[Event]) -> set[str]:
    """The payments (PaymentIntents) taken back by a refund in full (:func:`taken_back`) whose
    refunds, one failed or canceled since, no longer add up to the amount paid, with no
    dispute lost: Stripe gave them back. The charge's ``amount_refunded`` may still count the
    failed refund: it is read as taken back, and given back."""
    seen = _seen(events)
    return {
        pi
        for pi, refunds in seen.refunds.items()
        if -1 in refunds.values()
        and pi not in seen.lost
        and seen.refunded_in_full(pi)
        and sum(seen.counted(pi)) < seen.paid[pi]
    }


def reversals_due_each(events: list[Event]) -> dict[str, int]:
    """With REVERSAL_PER_REFUND: payment -> reversals due (distinct keys), one per refund
    counted (``reverse:{pk}:{refund_id}``), plus one for what remains
    (``reverse:{pk}``) when a dispute was lost or a charge event refunded more than the
    refunds counted, and something remains."""
    seen = _seen(events)
    due = {}
    for pi in sorted(set(seen.refunds) | set(seen.charged) | seen.disputed):
        counted = seen.counted(pi)
        rest = seen.paid.get(pi, 0) - sum(counted)
        more = pi in seen.lost or seen.charged.get(pi, 0) > sum(counted)
        due[pi] = len(counted) + int(more and rest > 0)
    return due


def _count(found: dict[str, int], refund: dict[str, Any]) -> None:
    """A refund's amount by id: the largest seen, and nothing ever once it failed."""
    amount = -1 if refund.get("status") in ("failed", "canceled") else int(refund["amount"])
    rid = str(refund["id"])
    found[rid] = -1 if -1 in (amount, found.get(rid)) else max(amount, found.get(rid, 0))
