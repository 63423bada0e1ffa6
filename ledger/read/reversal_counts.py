"""What refunds and lost disputes took back, in figures: the counters of wl:stats, and the
payments waiting for a person split by what they wait on (their fulfilment or their
reversal). The summary (ops API, CLI, dashboard) and /metrics read them here."""

from redis import Redis

from ledger import keys
from ledger.read.base import View
from ledger.read.payments import ATTENTION_STATES
from ledger.read.timeline import Leg
from ledger.stored import count, text


class ReversalCounts(View):
    """What refunds and lost disputes took back (docs/REVERSAL.md), counted since the start."""

    due: int
    """Reversals that became due (a fulfilled payment refunded in full or its dispute lost,
    with REVERSAL_ACTION set)."""
    reversed: int
    """Reversals the reversal action applied."""
    resolved_reversed: int
    """Reversals a person resolved as applied."""
    refunded_unfulfilled: int
    """Payments taken back before any effect: never called, or a settlement voided the key
    (``settled_voided`` counts those too)."""
    refund_reversals: int
    """Of ``reversed``, those of one refund (REVERSAL_PER_REFUND)."""
    reinstated: int
    """Reversed payments whose dispute was then won: held for a person, or fulfilled again."""
    refulfils_due: int
    """Fulfilments again that became due after a dispute won (REVERSAL_DISPUTE_WON=fulfil)."""
    refulfilled: int
    """Fulfilments again the fulfilment action applied (a person's word counts as a resolved
    fulfilment)."""
    settles_due: int
    """Settlements that became due: taken back after an attempt of a built-in action that may
    have applied (docs/REVERSAL.md)."""
    settled_voided: int
    """Settlements that found no effect and voided the payment's key: refunded_unfulfilled."""
    settled_applied: int
    """Settlements that found the effect: fulfilled, then taken back as any fulfilled one."""


def reversal_counts(stats: dict[str, str]) -> ReversalCounts:
    """From the wl:stats hash (decoded)."""
    return ReversalCounts(
        due=count(stats.get("reversals_due")),
        reversed=count(stats.get("reversals")),
        resolved_reversed=count(stats.get("resolved_reversed")),
        refunded_unfulfilled=count(stats.get("refunded_unfulfilled")),
        refund_reversals=count(stats.get("refund_reversals")),
        reinstated=count(stats.get("reinstated")),
        refulfils_due=count(stats.get("refulfils_due")),
        refulfilled=count(stats.get("refulfilled")),
        settles_due=count(stats.get("settles_due")),
        settled_voided=count(stats.get("settled_voided")),
        settled_applied=count(stats.get("settled_applied")),
    )


class NeedsAPerson(View):
    """The payments that wait for a person (failed, interrupted, held), by what they wait
    on: their fulfilment (a fulfilment again after a dispute won too: the customer is owed
    it as the first), or their reversal (held: a dispute won after it)."""

    fulfil: dict[str, int]
    reverse: dict[str, int]


def needs_a_person(redis: Redis, batch: int = 1000) -> NeedsAPerson:
    """The payments of each state that waits for a person, split by ``leg`` (read from each
    payment: these states hold what people have not decided yet, not the backlog)."""
    legs: dict[Leg, dict[str, int]] = {"fulfil": {}, "reverse": {}}
    for state in ATTENTION_STATES:
        legs["fulfil"][state] = legs["reverse"][state] = 0
        for start in range(0, redis.zcard(keys.state_index(state)), batch):
            members = redis.zrange(keys.state_index(state), start, start + batch - 1)
            pipe = redis.pipeline(transaction=False)
            for pk in members:
                pipe.hget(keys.payment(text(pk)), "leg")
            for leg in pipe.execute():
                legs["reverse" if leg == b"reverse" else "fulfil"][state] += 1
    return NeedsAPerson(fulfil=legs["fulfil"], reverse=legs["reverse"])
