"""The reversal half of the checker (ledgerctl/checker.py counts effects): what a client
that had refunds and disputes acknowledged expects of the reversals, against the
downstream's own record (the built-in SQLite downstream's ``reversals`` and
``reversal_calls`` tables) or, without one, the ledger's states. Used by the replay
script's ``--expect-once`` and the soak.

For every payment the client saw refunded or disputed (``ledgerctl.takebacks.taken_back``):

- taken back, with REVERSAL_ACTION set: as many reversals as effects (one), each reversal
  key applied once; no effect (refunded before its fulfilment: ``refunded_unfulfilled``)
  means no call of either action;
- not taken back (a partial refund, a dispute won), or REVERSAL_ACTION unset: no reversal;
- reversed for a lost dispute that was then won (``takebacks.won_after_loss``): with
  REVERSAL_DISPUTE_WON=fulfil, one re-grant (an order under ``refulfil:{payment_key}``, or
  without the downstream's record the ledger's ``refulfilled_at``); with the default
  (``hold``) held, waiting for a person; never left ``reversed``;
- taken back by a refund in full that then failed (``takebacks.given_back_by_refund``),
  once the ledger took it back (reversed, or refunded before any effect): held, waiting for
  a person; never left ``reversed`` or ``refunded_unfulfilled``, never fulfilled again.

A reversal is counted by its key (the ``reversals`` table keeps one row per key, and its
``reversal_calls`` say how many calls applied one), so no key is applied twice and a
payment has no more keys than expected: one per payment taken back by default; a
deployment that reverses each refund on its own passes ``expected_keys`` (payment -> keys
due, e.g. one per refund counted).
"""

import json
import sqlite3
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from redis import Redis

from ledger import keys

WAITING_FOR_A_PERSON = ("interrupted", "held", "failed")


@dataclass
class Reversals:
    """One payment's reversals as the downstream recorded them."""

    keys: int = 0
    """Distinct reversal keys recorded."""
    applied: int = 0
    """Reversal calls that applied (each key's first)."""
    calls: int = 0


@dataclass
class ReversalFindings:
    twice: list[dict[str, Any]] = field(default_factory=list)
    """Payments with more reversals than effects taken back, or a key applied twice."""
    missing: list[str] = field(default_factory=list)
    """Taken back with an effect, and no reversal (nor waiting for a person)."""
    orphaned: list[dict[str, Any]] = field(default_factory=list)
    """A reversal of a payment that has no effect, or that was not taken back."""
    called_after_refund: list[dict[str, Any]] = field(default_factory=list)
    """Refunded before its fulfilment (``refunded_unfulfilled``) yet an action was called."""
    for_a_person: list[str] = field(default_factory=list)
    """Taken back and waiting for a person (surfaced, not hidden)."""
    refunded_unfulfilled: list[str] = field(default_factory=list)
    """Taken back before any effect: not expected to be fulfilled."""
    not_regranted: list[str] = field(default_factory=list)
    """Reversed for a lost dispute, then won, and neither fulfilled again nor waiting for a
    person: no re-grant under REVERSAL_DISPUTE_WON=fulfil, left ``reversed`` under hold."""
    not_held: list[str] = field(default_factory=list)
    """Taken back (reversed, or refunded before any effect), then given back by a refund
    that failed, and not held for a person: left ``reversed`` or ``refunded_unfulfilled``,
    or fulfilled again."""
    won_after_loss: int = 0
    """Payments reversed for a lost dispute, then won."""
    regranted: int = 0
    """Of those, the ones fulfilled again (a re-grant)."""
    given_back: int = 0
    """Payments taken back by the ledger, then given back by a refund that failed."""
    reversed: int = 0
    taken_back: int = 0
    checks: int = 0

    @property
    def ok(self) -> bool:
        return not (
            self.twice
            or self.missing
            or self.orphaned
            or self.called_after_refund
            or self.not_regranted
            or self.not_held
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass(frozen=True)
class Regrant:
    """What follows a reversal for a lost dispute that was then won: whether the server
    fulfils it again (REVERSAL_DISPUTE_WON=fulfil) and the re-grants per payment (the
    downstream's ``refulfil:`` orders, or the ledger's ``refulfilled_at``)."""

    on: bool = False
    counted: Mapping[str, int] = field(default_factory=dict)


def read_reversals(db: str | None) -> tuple[dict[str, Reversals], dict[str, int]] | None:
    """Reversals per payment and fulfilment calls per payment from the built-in SQLite
    downstream's file (read-only), or None when there is no such file to read."""
    if not db or not Path(db).exists():
        return None
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        found: dict[str, Reversals] = {}
        if "reversals" in tables:
            for pk, n in conn.execute(
                "SELECT payment_key, COUNT(*) FROM reversals GROUP BY payment_key"
            ):
                found.setdefault(pk, Reversals()).keys = n
            for pk, outcome, n in conn.execute(
                "SELECT payment_key, outcome, COUNT(*) FROM reversal_calls"
                " GROUP BY payment_key, outcome"
            ):
                row = found.setdefault(pk, Reversals())
                row.calls += n
                row.applied += n if outcome == "applied" else 0
        calls = dict(conn.execute("SELECT payment_key, COUNT(*) FROM calls GROUP BY payment_key"))
    finally:
        conn.close()
    return found, calls


MARKS = ("fulfilled_at", "refulfilled_at", "reversed_at", "rv", "reversed_amount", "rest_reversed")
"""What a payment's hash keeps of what was done to it, whatever its state now (LEDGER.md)."""


def ledger_marks(redis: Redis, payment_keys: list[str]) -> dict[str, dict[str, str]]:
    pipe = redis.pipeline(transaction=False)
    for pk in payment_keys:
        pipe.hmget(keys.payment(pk), *MARKS)
    return {
        pk: {name: v.decode() for name, v in zip(MARKS, values, strict=True) if v is not None}
        for pk, values in zip(payment_keys, pipe.execute(), strict=True)
    }


def from_marks(marks: Mapping[str, Mapping[str, str]]) -> dict[str, Reversals]:
    """Without the downstream's record, from each payment's hash (``rv``, ``rest_reversed``,
    ``reversed_amount``, ``reversed_at``), whatever its state now: one reversal per refund
    reversed on its own, and those of the whole payment or what remained of it as counted
    (or, recorded before they were, one when the reversals carried more than the refunds':
    one of what remains with the amount paid not known carried nothing)."""
    found = {}
    for pk, mark in marks.items():
        each = json.loads(mark.get("rv") or "{}")
        beyond = int(int(mark.get("reversed_amount") or 0) > sum(each.values()))
        n = len(each) + max(int(mark.get("rest_reversed") or 0), beyond)
        n = n or int("reversed_at" in mark)
        if n:
            found[pk] = Reversals(n, n, n)
    return found


def check_reversals(
    taken: Mapping[str, bool],
    reversal_on: bool,
    effects: Mapping[str, int],
    states: Mapping[str, str],
    reversals: Mapping[str, Reversals],
    fulfil_calls: Mapping[str, int] | None = None,
    expected_keys: Mapping[str, int] | None = None,
    won_after_loss: Collection[str] = (),
    regrant: Regrant | None = None,
    given_back: Collection[str] = (),
) -> ReversalFindings:
    """``taken``: payment -> taken back, for every payment the client refunded or disputed;
    ``effects``: fulfilment effects per payment; ``states``: the ledger's; ``reversals``: per
    payment; ``fulfil_calls``: downstream fulfilment calls per payment, when known;
    ``expected_keys``: reversal keys due per payment with an effect, instead of one per
    payment taken back; ``won_after_loss``: payments whose dispute was lost, then won;
    ``regrant``: what follows their reversal; ``given_back``: payments taken back by a
    refund in full that then failed."""
    found = ReversalFindings()
    for pk, back in sorted(taken.items()):
        found.checks += 1
        got = reversals.get(pk, Reversals())
        effect, state = effects.get(pk, 0), states.get(pk, "")
        due = back if expected_keys is None else expected_keys.get(pk, 0)
        expected = int(due) if effect and reversal_on else 0
        found.taken_back += back
        found.reversed += min(got.keys, 1)
        waiting = False
        if got.keys > max(expected, 1) or got.applied > got.keys:  # a key applied twice
            found.twice.append({"payment": pk, "reversals": got.keys, "applied": got.applied})
        elif got.keys > expected:
            why = "no effect" if back and reversal_on else "not taken back"
            found.orphaned.append({"payment": pk, "reversals": got.keys, "why": why})
        elif back and state in WAITING_FOR_A_PERSON and (got.keys < expected or not effect):
            waiting = True
        elif got.keys < expected:
            found.missing.append(pk)
        reversed_all = expected and got.keys >= expected
        if pk in won_after_loss and reversed_all:
            waiting = _won_after_reversal(found, pk, state, regrant or Regrant()) or waiting
        if pk in given_back and (reversed_all or not effect):
            waiting = _given_back(found, pk, state, regrant or Regrant()) or waiting
        if waiting:
            found.for_a_person.append(pk)
        if state == "refunded_unfulfilled":
            found.refunded_unfulfilled.append(pk)
            called = (fulfil_calls or {}).get(pk, 0) + got.calls
            if called or effect:
                found.called_after_refund.append({"payment": pk, "calls": called})
    return found


def _won_after_reversal(found: ReversalFindings, pk: str, state: str, regrant: Regrant) -> bool:
    """A payment reversed for a lost dispute, then won: fulfilled again once (checked for
    twice by the effects' checker), held or stopped for a person, or not re-granted (never
    left reversed silently, whatever REVERSAL_DISPUTE_WON says). Whether it waits for a
    person."""
    found.won_after_loss += 1
    again = regrant.counted.get(pk, 0)
    found.regranted += min(again, 1)
    if state in WAITING_FOR_A_PERSON:
        return True
    if (regrant.on and not again) or state == "reversed":
        found.not_regranted.append(pk)
    return False


def _given_back(found: ReversalFindings, pk: str, state: str, regrant: Regrant) -> bool:
    """A payment the ledger took back (reversed, or refunded before any effect) whose refund
    then failed: held for a person, who grants it by hand, never left taken back nor
    fulfilled again by the ledger (a failed refund is always a person's: the charge may still
    count it as refunded). Whether it waits for a person."""
    found.given_back += 1
    if state in ("reversed", "refunded_unfulfilled") or regrant.counted.get(pk, 0):
        found.not_held.append(pk)
        return False
    return state in WAITING_FOR_A_PERSON
