"""What a person does next with a payment that waits for them (``interrupted``, or ``held``):
what to check, the idempotency key its calls carry (the one a downstream saw), and the two
decisions (three for one held after it was taken back) as the dashboard's buttons and as
``webhook-ledger`` commands: one wording for the dashboard's payment page and
``webhook-ledger payment``.

Apart from ledger/read/payments.py, which reads what Redis stores: this only judges a
payment already read. Not part of the API: its ``purchase.idempotency_key`` and
``reversal`` (``idempotency_key``, ``refulfil.idempotency_key``) carry the same keys."""

from dataclasses import dataclass

from ledger.read.payments import Payment

WAITING = ("interrupted", "held")
"""The states a person resolves (``resolve --fulfilled`` or ``--retry``)."""


@dataclass(frozen=True)
class NextStep:
    kind: str
    """``retake`` or ``reinstated`` (held for a person to act by hand), ``decide`` (another
    hold) or ``check`` (an interrupted call)."""
    check: str
    """What to do before deciding, to be followed by ", then:"."""
    idempotency_key: str | None
    key_said: str
    """What the key is to a person: the one its calls carried, or (no call yet) will carry."""
    fulfilled: str
    """What the ``--fulfilled`` decision says (the dashboard's button)."""
    retry: str | None
    """What the ``--retry`` decision says; None when only a person acts (``by_hand``)."""
    not_applied: str | None
    """What the ``--not-applied`` decision says: held after it was taken back (refunded in
    full, a dispute lost) while a call may have applied it; else None."""
    commands: list[tuple[str, str]]
    """Each decision as a ``webhook-ledger`` command, with what it means."""


def key_of(p: Payment) -> str | None:
    """The idempotency key the call of the payment's current leg carries, as the worker
    builds it: the fulfilment's (``fulfil:{payment_key}``; a settlement looks for the same),
    its reversal's (``reverse:{payment_key}``, or one refund's
    ``reverse:{payment_key}:{refund_id}``) or its fulfilment again's (``refulfil:…``)."""
    r = p.reversal
    if p.leg == "reverse":
        return r.idempotency_key if r else None
    if p.leg == "refulfil":
        return r.refulfil.idempotency_key if r and r.refulfil else None
    return p.purchase.idempotency_key


def next_step(p: Payment, reverses: bool) -> NextStep | None:
    """What a person does next; None unless the payment waits for their decision.
    ``reverses``: REVERSAL_ACTION is set (a payment taken back is reversed once fulfilled)."""
    if p.state not in WAITING:
        return None
    retake = p.by_hand and p.reversal is not None and p.reversal.taken_back_again is not None
    reversing = p.leg == "reverse"
    if retake:
        kind, fulfilled = "retake", "Taken back by hand: mark reversed"
        check = (
            "Taken back again after it was granted again (see why above): its reversal does "
            "not run twice. Take it back by hand"
        )
    elif p.by_hand:
        kind, fulfilled = "reinstated", "Granted by hand: mark fulfilled"
        check = (
            "Stripe gave it back after it was taken back (see why above): the customer paid. "
            "Grant it by hand"
        )
    elif p.state == "held" and not p.attempts_started:
        kind, fulfilled = (
            "decide",
            "Fulfilled another way (by hand, or as its twin): mark fulfilled",
        )
        check = "Held for a person before any call (see why above). Decide"
    else:
        kind = "decide" if p.state == "held" else "check"
        done = "taken back: mark reversed" if reversing else "applied: mark fulfilled"
        fulfilled = f"It was {done}"
        check = (
            "Held for a person (see why above). Decide"
            if p.state == "held"
            else "The reversal action may or may not have taken this payment's effect back. "
            "Check the downstream"
            if reversing
            else "The downstream may or may not have applied this payment. Check it"
        )
    retry = None if p.by_hand else f"It was not: run {'the reversal ' if reversing else ''}again"
    if kind == "decide" and not p.attempts_started:
        retry = "Fulfil it: run it now"
        if p.same_purchase_as:  # start_attempt.lua holds it again while its twin is engaged
            retry = (
                f"Fulfil it: run it now, if {p.same_purchase_as} (the same purchase) has no "
                "effect and runs none (while it has or may have one, it is held again)"
            )
    not_applied = None
    if taken_back_held(p):
        # a retry holds it again while Stripe takes it back: no call is owed
        fulfilled = "It was applied: mark fulfilled" + (" (then reversed)" if reverses else "")
        not_applied = "It was not: refunded_unfulfilled, no reversal"
        retry = "Stripe gave it back since: run again"
    resolve = f"webhook-ledger resolve {p.payment_key}"
    commands = [(f"{resolve} --fulfilled", fulfilled)]
    if not_applied:
        commands.append((f"{resolve} --not-applied", not_applied))
    if retry:
        commands.append((f"{resolve} --retry", retry))
    said = (
        "Idempotency key of its calls (what the downstream saw)"
        if p.attempts_started
        else "Idempotency key its call will carry (no call yet)"
    )
    return NextStep(kind, check, key_of(p), said, fulfilled, retry, not_applied, commands)


def taken_back_held(p: Payment) -> bool:
    """Held after it was taken back (refunded in full, a dispute lost) while a call of its
    fulfilment may have applied it (lua/take_back_steps.lua hold_taken_back): a person says whether
    it applied, as lua/operator.lua's not_applied takes it."""
    taken = p.reversal.taken_back if p.reversal else None
    return p.state == "held" and not p.by_hand and p.leg == "fulfil" and taken is not None


def elsewhere(p: Payment) -> str:
    """What to check in a downstream the ledger cannot read (not the built-in SQLite one):
    the receipt of the payment's current leg when one came, else the user's own system,
    under its key (an interrupted call, one that got a 500, left no receipt)."""
    r = p.reversal
    receipt, which = p.receipt, "the receipt below"
    if p.leg == "reverse":
        receipt, which = (r.receipt if r else None), "the reversal's receipt"
    elif p.leg == "refulfil":
        receipt, which = (r.refulfil.receipt if r and r.refulfil else None), "its receipt"
    key = key_of(p)
    under = f" for the idempotency key {key}" if key else ""
    if receipt:
        return f"check {which} against your system{under}"
    if not p.attempts_started:
        return "no call yet"
    return f"no receipt came (the last error says why): look in your system{under}"
