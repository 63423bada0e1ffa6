"""The soak's refunds and disputes (scripts/soak.py): which payments get which, when they
are sent, and the final count of reversals.

Each payment gets, in turn, no take-back, a full refund, a partial one, two partials adding
up to it, a dispute lost or a dispute won (ledgerctl/takebacks.py). Most are sent with the
next batch of traffic (a few seconds later: usually after the fulfilment, sometimes while
it waits behind the breaker or a fault); in every fourth round of six they go in the
payment's own batch, shuffled among its events, racing its fulfilment.
"""

import random
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from redis import Redis

from ledger import keys
from ledgerctl import samples, takebacks
from ledgerctl.checker import Findings, check
from ledgerctl.reversal_check import ReversalFindings, check_reversals, from_marks, read_reversals

RACE_EVERY = 4
"""One round of six payments in this many sends its take-backs with the payment's events."""
UNFULFILLABLE = ("refunded_unfulfilled", "held")
SETTLED = ("fulfilled", "interrupted", "failed", "reversed", "refunded_unfulfilled", "held")

Delivery = tuple[str, bytes]


class Refunds:
    def __init__(self) -> None:
        self.count = 0
        self.later: list[Delivery] = []
        self.kinds: Counter[str] = Counter()
        self.events: dict[str, dict[str, Any]] = {}
        """The events the final check reads (each charge.succeeded and every take-back)."""

    def plan(self, rng: random.Random, events: list[dict[str, Any]]) -> list[Delivery]:
        """One payment's take-back deliveries to send now (racing); the others wait for
        :meth:`due`."""
        n, self.count = self.count, self.count + 1
        kind = takebacks.kind_of(n)
        extra = takebacks.for_payment(rng, events, kind)
        charge = next(e for e in events if e["type"] == "charge.succeeded")
        for event in [charge, *extra]:
            self.events[event["id"]] = event
        racing = (n // len(takebacks.KINDS)) % RACE_EVERY == 0
        self.kinds[f"{kind}{' racing' if racing and extra else ''}"] += 1
        found = [(e["id"], samples.encode(e)) for e in extra]
        if racing:
            return found
        self.later += found
        return []

    def due(self) -> list[Delivery]:
        out, self.later = self.later, []
        return out

    def check(
        self,
        acked: Counter[str],
        recorded: dict[str, int],
        paid: set[str],
        effects: dict[str, int],
        states: dict[str, str],
        marks: Mapping[str, Mapping[str, str]],
        reversals_db: str | None,
    ) -> tuple[Findings, ReversalFindings]:
        """The checker over effects (a payment refunded before its fulfilment is not
        expected to have one) and over reversals (REVERSAL_ACTION is set when
        ``reversals_db`` is given; without its record, counted from the payments' ``marks``:
        ``reversal_check.ledger_marks``)."""
        taken = takebacks.taken_back([self.events[i] for i in sorted(acked) if i in self.events])
        read = read_reversals(reversals_db)
        reversals, calls = read or (from_marks(marks), None)
        undone = check_reversals(taken, reversals_db is not None, effects, states, reversals, calls)
        expected = {
            pk
            for pk in paid
            if not (taken.get(pk) and not effects.get(pk) and states.get(pk) in UNFULFILLABLE)
        }
        return check(acked, recorded, expected, effects, states), undone


STRIPE_ID = re.compile(r"\b[a-z]{2,4}_[A-Za-z0-9]+")


def held_reasons(redis: Redis, states: Mapping[str, str]) -> dict[str, int]:
    """Why the payments left ``held`` wait for a person: each reason with its Stripe ids
    taken out, and how many give it."""
    held = sorted(pk for pk, state in states.items() if state == "held")
    pipe = redis.pipeline(transaction=False)
    for pk in held:
        pipe.hget(keys.payment(pk), "hold_reason")
    reasons = Counter(STRIPE_ID.sub("…", (reason or b"").decode()) for reason in pipe.execute())
    return dict(reasons.most_common())


def summary(undone: ReversalFindings, kinds: Counter[str]) -> dict[str, Any]:
    found = undone.as_dict()
    found["refunded_unfulfilled"] = len(undone.refunded_unfulfilled)
    return {**found, "kinds": dict(sorted(kinds.items()))}
