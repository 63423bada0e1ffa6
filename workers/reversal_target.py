"""Where a payment's reversal may be called: only where its effect is.

After FULFILMENT_ACTION moved to another downstream (docs/ACTIONS.md: "move by changing the
URL"), REVERSAL_ACTION, moved with it, would take back nothing where the effect is, and the
ledger would say ``reversed``: the job holds the reversal for a person instead
(docs/REVERSAL.md, "Only where its effect is").
"""

import orjson
from redis import Redis

from ledger import keys
from ledger.stored import text

ATTEMPT = "attempt:"


def applied_on(redis: Redis, payment_key: str) -> str | None:
    """The downstream the payment's effect went to, by its action's name for it
    (workers.actions.downstream_of), from its latest attempt that applied it (a fulfilment,
    a fulfilment again, a settlement that found it), not a reversal's: the ``on`` of its
    record, or, when the record has none, the payment's ``called_on`` if that names one
    downstream alone (start_attempt.lua leaves a replay-safe attempt's to it). When no
    attempt applied it: where it was held for after FULFILMENT_ACTION moved (``moved_from``,
    one downstream alone), which a person then found it applied on. Else None (a person
    resolved it as fulfilled, or granted it by hand; an attempt of an action that is not
    replay-safe, made before attempts kept ``on``)."""
    fields = {text(k): v for k, v in redis.hgetall(keys.payment(payment_key)).items()}
    latest, record = 0, None
    for name, raw in fields.items():
        if not name.startswith(ATTEMPT):
            continue
        attempt = orjson.loads(raw)
        token = int(name.removeprefix(ATTEMPT))
        applied = attempt.get("outcome") == "fulfilled" and attempt.get("leg") != "reverse"
        if applied and token > latest:
            latest, record = token, attempt
    if record is None:  # a person found it applied where its calls went before a move
        moved = text(fields.get("moved_from", b"")).split()
        return moved[0] if len(moved) == 1 else None
    called_on = text(fields.get("called_on", b"")).split()
    return record.get("on") or (called_on[0] if len(called_on) == 1 else None)


def refusal(applied: str | None, fulfilment: str, reversal: str) -> str | None:
    """Why the reversal must not be called (its reason for a person), or None: where the
    effect went is not known, or FULFILMENT_ACTION still names it (REVERSAL_ACTION is the
    merchant's pair to it: changing that alone is theirs to make), or REVERSAL_ACTION does."""
    if applied is None or applied in (fulfilment, reversal):
        return None
    return (
        f"reversal: not called: its fulfilment went to {applied}, FULFILMENT_ACTION names"
        f" {fulfilment or 'an unnamed downstream'} now: take it back there by hand, then resolve"
        " it as fulfilled (it becomes reversed), or retry it once FULFILMENT_ACTION names that"
        " downstream again"
    )
