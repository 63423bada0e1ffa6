"""Read back every layer after a run and put them side by side."""

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis import Redis
from rich.table import Table
from rich.text import Text

from ledger import keys
from ledger.downstream import read_downstream
from ledger.read import payments, stats
from ledger.read.stats import Counters
from ledger.settings import Settings, fingerprint
from ledger.stored import decode_hash
from ledgerctl.checker import Findings, check
from ledgerctl.prove_probe import Probe
from ledgerctl.replay.options import WHERE
from ledgerctl.replay.sending import Answer
from ledgerctl.reversal_check import (
    Regrant,
    ReversalFindings,
    check_reversals,
    from_marks,
    ledger_marks,
    read_reversals,
)
from ledgerctl.terminal import line, literal

REFUSED_SECRET = "signature_mismatch"
"""The service's reason when no configured secret verifies a signature."""
SETTLED = ("fulfilled", "failed", "interrupted", "reversed", "refunded_unfulfilled", "held")
"""States a payment stays in once the run's deliveries are recorded (a payment taken back
leaves ``fulfilled`` when its refund is recorded, and settles ``reversed``)."""
UNFULFILLABLE = ("refunded_unfulfilled", "held")
"""States of a payment taken back before any effect: not expected to be fulfilled."""


@dataclass(frozen=True)
class Undo:
    """What the run took back: payment -> taken back, for each payment refunded or disputed
    (ledgerctl/takebacks.py), whether the server reverses (REVERSAL_ACTION), the SQLite
    file of its reversals, if any, with REVERSAL_PER_REFUND the reversals due per payment
    (one per refund: ``takebacks.reversals_due_each``), the payments whose dispute was lost,
    then won (``takebacks.won_after_loss``), whether the server fulfils those again
    (REVERSAL_DISPUTE_WON=fulfil), and the payments a refund in full took back until it
    failed (``takebacks.given_back_by_refund``)."""

    taken: dict[str, bool]
    reversal_on: bool
    db: str | None
    expected_keys: dict[str, int] | None = None
    won_after_loss: frozenset[str] = frozenset()
    refulfil_on: bool = False
    given_back: frozenset[str] = frozenset()


def event_counts(redis: Redis, event_ids: list[str]) -> dict[str, int]:
    pipe = redis.pipeline(transaction=False)
    for event_id in event_ids:
        pipe.hget(keys.event(event_id), "n")
    return {e: int(n or 0) for e, n in zip(event_ids, pipe.execute(), strict=True)}


def payment_states(redis: Redis, payment_keys: list[str]) -> dict[str, str]:
    pipe = redis.pipeline(transaction=False)
    for pk in payment_keys:
        pipe.hget(keys.payment(pk), "state")
    return {pk: (s or b"").decode() for pk, s in zip(payment_keys, pipe.execute(), strict=True)}


def held(redis: Redis, payment_keys: set[str]) -> set[str]:
    """The payments among these that the server holds for a person (state ``held``)."""
    states = payment_states(redis, sorted(payment_keys))
    return {pk for pk, state in states.items() if state == "held"}


def wait_settled(
    redis: Redis, payment_keys: list[str], timeout: float, tick: Callable[[int], None]
) -> bool:
    """Wait until every payment is in a SETTLED state; False on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        states = payment_states(redis, payment_keys)
        done = sum(1 for s in states.values() if s in SETTLED)
        tick(done)
        if done == len(payment_keys):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def attempts_of(redis: Redis, payment_keys: list[str]) -> dict[str, int]:
    pipe = redis.pipeline(transaction=False)
    for pk in payment_keys:
        pipe.hgetall(keys.payment(pk))
    totals = Counter[str]()
    for pk, raw in zip(payment_keys, pipe.execute(), strict=True):
        record = payments.payment_record(pk, decode_hash(raw))
        totals["started"] += record.attempts_started
        totals["finished"] += record.attempts_finished
        totals["stale"] += record.stale_finishes
    return dict(totals)


def reversal_db(settings: Settings, db: str | None) -> str | None:
    """The SQLite file of the reversals: REVERSAL_ACTION's when it is the built-in SQLite
    downstream, else the effects' one (``--downstream-db``, or FULFILMENT_ACTION's)."""
    action = settings.REVERSAL_ACTION
    return action.target if action is not None and action.scheme == "sqlite" else db


def downstream_effects(
    db: str | None,
    payment_keys: list[str],
    marks: dict[str, dict[str, str]],
    counted_by: Probe | None = None,
) -> tuple[str, dict[str, int], int | None, dict[str, int]]:
    """Effects per payment from the merchant's own tables (``counted_by``, --effects-sql),
    else the downstream's own record when it keeps one, its calls, and its re-grants per
    payment (a fulfilment again after a dispute won: not an effect); without one, the
    ledger's marks (``fulfilled_at``, ``refulfilled_at``: a payment reversed since had its
    effect)."""
    if counted_by is not None:
        effects = {pk: counted_by(pk) for pk in payment_keys}
        regrants = {pk: int("refulfilled_at" in marks[pk]) for pk in payment_keys}
        return "your tables (--effects-sql)", effects, None, regrants
    if db:
        data = read_downstream(db)["payments"]
        rows = {pk: data.get(pk, {}) for pk in payment_keys}
        effects = {pk: int(r.get("effects", 0)) for pk, r in rows.items()}
        regrants = {pk: int(r.get("regrants", 0)) for pk, r in rows.items()}
        calls = sum(int(r.get("calls", 0)) for r in rows.values())
        return "downstream (sqlite)", effects, calls, regrants
    effects = {pk: int("fulfilled_at" in marks[pk]) for pk in payment_keys}
    regrants = {pk: int("refulfilled_at" in marks[pk]) for pk in payment_keys}
    return "ledger (no downstream record)", effects, None, regrants


def delta(after: Counters, before: Counters, name: str) -> int:
    return int(getattr(after, name)) - int(getattr(before, name))


def build(
    answers: list[Answer],
    before: Counters,
    after: Counters,
    recorded: dict[str, int],
    paid: set[str],
    redis: Redis,
    db: str | None,
    undo: Undo,
    counted_by: Probe | None = None,
) -> tuple[dict[str, Any], Findings, ReversalFindings]:
    """All layers of one run, and the checker's findings (effects, then reversals)."""
    sent = Counter(a.kind for a in answers if a.final)  # per delivery, retries apart
    retries = sum(1 for a in answers if not a.final)
    statuses = Counter(str(a.status) for a in answers)
    acked = Counter(a.event_id for a in answers if a.kind == "valid" and a.acked)
    pks = sorted(paid | set(undo.taken))
    states = payment_states(redis, pks)
    marks = ledger_marks(redis, pks)
    source, effects, calls, regrants = downstream_effects(db, pks, marks, counted_by)
    rejected = {
        k: v - before.rejected_by_reason.get(k, 0)
        for k, v in after.rejected_by_reason.items()
        if v - before.rejected_by_reason.get(k, 0)
    }
    recorded_reversals = read_reversals(undo.db)
    reversals, fulfil_calls = recorded_reversals or (from_marks(marks), None)
    regrant = Regrant(undo.refulfil_on, regrants)
    undone = check_reversals(
        undo.taken,
        undo.reversal_on,
        effects,
        states,
        reversals,
        fulfil_calls,
        undo.expected_keys,
        undo.won_after_loss,
        regrant,
        undo.given_back,
    )
    expected = {
        pk
        for pk in paid
        if not (undo.taken.get(pk) and not effects.get(pk) and states.get(pk) in UNFULFILLABLE)
    }
    layers = {
        "sent": {"total": len(answers), **dict(sent), **({"retries": retries} if retries else {})},
        "answered": dict(sorted(statuses.items())),
        "ledger": {
            "deliveries": delta(after, before, "deliveries"),
            "events": delta(after, before, "events"),
            "duplicates": delta(after, before, "duplicates"),
            "rejected": delta(after, before, "rejected"),
            "rejected_by_reason": rejected,
        },
        "payments": dict(Counter(states[pk] for pk in sorted(paid))),
        "attempts": attempts_of(redis, sorted(paid)),
        "downstream": {"source": source, "calls": calls, "effects": sum(effects.values())}
        | ({"regrants": sum(regrants.values())} if any(regrants.values()) else {}),
    }
    if undo.taken:
        source = "downstream (sqlite)" if recorded_reversals else "ledger"
        layers["reversals"] = reversal_layer(source, len(undo.taken), undone)
    return layers, check(acked, recorded, expected, effects, states, regrants), undone


def reversal_layer(source: str, refunded: int, undone: ReversalFindings) -> dict[str, Any]:
    """What the reversals' layer shows: taken back and reversed of the payments refunded or
    disputed, and, when there are any, those won after a loss or given back."""
    shown: dict[str, Any] = {
        "source": source,
        "refunded or disputed": refunded,
        "taken back": undone.taken_back,
        "reversed": undone.reversed,
        "refunded_unfulfilled": len(undone.refunded_unfulfilled),
    }
    if undone.won_after_loss:
        shown |= {"won after loss": undone.won_after_loss, "re-granted": undone.regranted}
    if undone.given_back:
        shown["given back"] = undone.given_back
    return shown


def secret_refused(answers: list[Answer]) -> int:
    """Valid deliveries the endpoint refused for their signature: it has another secret."""
    return sum(1 for a in answers if a.kind == "valid" and a.reason == REFUSED_SECRET)


def notes(answers: list[Answer], secret: str, deadline: float) -> list[str]:
    """What the reader must know about the answers beyond their counts, in words."""
    out = []
    refused = secret_refused(answers)
    if refused:
        out.append(
            f"the endpoint refuses this secret ({fingerprint(secret)}): {refused} valid "
            f"deliveries answered 400 {REFUSED_SECRET}; the right one is {WHERE}"
        )
    redirects = Counter(
        (a.status, a.location) for a in answers if 300 <= a.status < 400 and a.kind == "valid"
    )
    for (status, location), n in sorted(redirects.items()):
        out.append(
            f"{n} valid deliveries answered {status} to {literal(location or '(no Location)')}:"
            " not followed, not acknowledged (Stripe does not follow redirects either)"
        )
    cut = sum(1 for a in answers if a.error == "deadline")
    if cut:
        out.append(f"{cut} requests got no whole answer within {deadline:g} s (--request-timeout)")
    return out


def table(
    layers: dict[str, Any],
    findings: Findings,
    passed: bool,
    reversals: ReversalFindings | None = None,
) -> Table:
    out = Table(title="Replay: what each layer saw")
    out.add_column("layer", style="bold")
    out.add_column("observed")

    def fmt(values: dict[str, Any]) -> str:
        return (
            "  ".join(
                f"{k} {fmt(v) if isinstance(v, dict) else '-' if v is None else v}"
                for k, v in values.items()
            )
            or "-"
        )

    for name, values in layers.items():
        out.add_row(literal(name), literal(fmt(values)))
    verdict = Text("ok", "green") if passed else Text("FAILED", "red")
    out.add_row(
        "checker",
        line(
            verdict,
            f" checks {findings.checks}  lost {len(findings.lost)}  duplicated "
            f"{len(findings.duplicated)}  unfulfilled {len(findings.unfulfilled)}  interrupted "
            f"{len(findings.interrupted)}  unexpected {len(findings.unexpected)}",
        ),
    )
    if reversals is not None and reversals.checks:
        won = reversals.won_after_loss
        regrants = f"  not re-granted {len(reversals.not_regranted)}" if won else ""
        regrants += f"  not held {len(reversals.not_held)}" if reversals.given_back else ""
        out.add_row(
            "reversals",
            f"checks {reversals.checks}  reversed twice {len(reversals.twice)}  missing "
            f"{len(reversals.missing)}  orphaned {len(reversals.orphaned)}  called after refund "
            f"{len(reversals.called_after_refund)}  for a person {len(reversals.for_a_person)}"
            + regrants,
        )
    return out


def summary_now(redis: Redis, queue: str) -> Counters:
    """The ledger's counters, as the ops API and ``webhook-ledger summary`` read them."""
    return stats.counters(redis)
