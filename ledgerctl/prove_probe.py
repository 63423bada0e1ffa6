"""How ``webhook-ledger prove-action`` counts a payment's effects, and what a count means.

A probe answers the number of effects in the downstream for one payment key: the user's
``--effects module:function``, the user's ``--effects-sql`` (psycopg's named parameters,
``%(payment_key)s``, also for SQLite) on ``--effects-db`` or the action's own database, or,
for the built-in downstreams, their own table: SQLite's ``orders``, PostgreSQL's
``webhook_ledger_effects`` (one row per applied key, written with the effect; a key a
settlement voided is none, and a reversal's key is the reversal's).

A reversal probe (REVERSAL_ACTION set) answers the number of reversals applied for one
payment key the same ways: ``--reversals``, ``--reversals-sql`` on ``--reversals-db``, or
the built-in downstreams' reversal keys (SQLite's ``reversals``, the ``reverse:`` keys of
PostgreSQL's table).
"""

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from ledger.setting_urls import ActionSpec
from ledger.settings import Settings
from workers.effects import imported
from workers.exceptions import ActionConfigError
from workers.postgres_schema import TABLE

Probe = Callable[[str], int]

BUILT_IN = {
    "sqlite": "SELECT count(*) FROM orders WHERE payment_key = %(payment_key)s",
    "postgresql": (
        f"SELECT count(*) FROM {TABLE} WHERE payment_key = %(payment_key)s AND voided_at IS NULL"
        " AND idempotency_key NOT LIKE 'reverse:%%'"
    ),
}
BUILT_IN_REVERSALS = {
    "sqlite": "SELECT count(*) FROM reversals WHERE payment_key = %(payment_key)s",
    "postgresql": (
        f"SELECT count(*) FROM {TABLE} WHERE payment_key = %(payment_key)s"
        " AND idempotency_key LIKE 'reverse:%%'"
    ),
}
PASSING = ("exactly once", "at most once (interrupted)", "skipped")
NOT_RUN = "not run"
"""A fault --max-seconds left out: it proves nothing, so the run exits 1 (reported apart from
the failed ones)."""
NOTHING_TO_TAKE_BACK = "nothing to take back"
"""A payment refunded in full before any attempt: neither action ran for it."""
HELD = "at most once (held)"
"""Taken back after a call that may have applied, on an action that cannot settle it: a
person checks the downstream (docs/REVERSAL.md)."""


class NoProbe(Exception):
    """Effects cannot be counted for this action: the option to give, in words."""


def probe_for(s: Settings, effects: str | None, sql: str | None, db: str | None) -> Probe:
    """The probe the options name, else the built-in downstream's."""
    if effects:
        return imported_probe(effects, "--effects")
    spec = s.FULFILMENT_ACTION
    statement = sql or BUILT_IN.get(spec.scheme if not db else "")
    if statement is None:
        raise NoProbe(
            f"FULFILMENT_ACTION is a {spec.scheme} action: give --effects module:function or"
            " --effects-sql (with --effects-db) to count its effects"
        )
    return sql_probe(db or database_of(spec), statement, "--effects-db")


def reversal_probe_for(
    s: Settings, reversals: str | None, sql: str | None, db: str | None, effects_db: str | None
) -> Probe:
    """The probe of REVERSAL_ACTION's reversals the options name, else the built-in
    downstream's; ``--reversals-sql`` runs on ``--reversals-db``, else on REVERSAL_ACTION's
    database, else where ``--effects-sql`` runs."""
    spec = s.REVERSAL_ACTION
    if spec is None:
        raise NoProbe("--reversals, --reversals-sql: REVERSAL_ACTION is not set")
    if reversals:
        return imported_probe(reversals, "--reversals")
    statement = sql or BUILT_IN_REVERSALS.get(spec.scheme if not db else "")
    if statement is None:
        raise NoProbe(
            f"REVERSAL_ACTION is a {spec.scheme} action: give --reversals module:function or"
            " --reversals-sql (with --reversals-db) to count its reversals"
        )
    url = db or database_of(spec) or effects_db or database_of(s.FULFILMENT_ACTION)
    return sql_probe(url, statement, "--reversals-db")


def database_of(spec: ActionSpec) -> str:
    """The database URL of a built-in downstream's action, else ''."""
    if spec.scheme == "sqlite":
        return f"sqlite:///{spec.target}"
    return spec.target if spec.scheme == "postgresql" else ""


def imported_probe(target: str, option: str) -> Probe:
    try:
        found: Probe = imported(target, option)
    except ActionConfigError as exc:
        raise NoProbe(f"{option}: {exc}") from exc
    return lambda key: int(found(key))


def sql_probe(url: str, statement: str, option: str) -> Probe:
    if url.startswith("sqlite:///"):
        return sqlite_probe(url.removeprefix("sqlite:///"), statement)
    if url.startswith(("postgresql://", "postgres://")):
        return postgres_probe(url, statement)
    raise NoProbe(f"{option}: expected sqlite:///path or postgresql://…")


def sqlite_probe(path: str, statement: str) -> Probe:
    named = re.sub(r"%\((\w+)\)s", r":\1", statement)

    def count(key: str) -> int:
        with sqlite3.connect(path, timeout=10) as db:
            row = db.execute(named, {"payment_key": key}).fetchone()
        return int(row[0]) if row else 0

    return count


def postgres_probe(url: str, statement: str) -> Probe:
    def count(key: str) -> int:
        with psycopg.connect(url, connect_timeout=5) as conn:
            row = conn.execute(statement, {"payment_key": key}).fetchone()
        return int(row[0]) if row else 0

    return count


@dataclass(frozen=True)
class Row:
    """One fault's outcome, as printed."""

    fault: str
    payment: str
    calls: int
    effects: int
    state: str
    verdict: str
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict in PASSING


def verdict(effects: int, state: str) -> str:
    """What one payment's effects and final state prove."""
    if effects > 1:
        return "more than once"
    if state == "interrupted":
        return "at most once (interrupted)"
    if state == "fulfilled":
        return "exactly once" if effects == 1 else "fulfilled without an effect"
    if effects == 1:
        return "effect without fulfilled"
    return f"not fulfilled ({state or 'unknown'})"


@dataclass(frozen=True)
class ReversalRow:
    """One reversal fault's outcome, as printed: each action's calls, the fulfilment's
    effects and the reversals the probe counted."""

    fault: str
    payment: str
    calls: int
    effects: int
    reversal_calls: int
    reversals: int
    state: str
    verdict: str
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict in (*PASSING, NOTHING_TO_TAKE_BACK, HELD)


def reversal_verdict(effects: int, reversals: int, state: str) -> str:
    """What a payment fulfilled, then taken back, proves: reversed once, or left for a
    person with at most one reversal (an action that is not replay-safe)."""
    if effects > 1 or reversals > 1:
        return "more than once"
    if state == "interrupted":
        return "at most once (interrupted)"
    if state == "reversed":
        return "exactly once" if reversals == 1 else "reversed without a reversal"
    if reversals == 1:
        return "reversal without reversed"
    return f"not reversed ({state or 'unknown'})"


def cut_off_verdict(effects: int, reversals: int, state: str) -> str:
    """A payment refunded in full after its fulfilment call was cut off, which may have
    applied: reversed once if it did, its key voided if it did not (a built-in action's
    settlement: nothing to take back), else left for a person with at most one effect."""
    if effects > 1 or reversals > 1:
        return "more than once"
    if state == "refunded_unfulfilled":
        if effects:
            return "effect left after refunded_unfulfilled"
        return "reversal with nothing to take back" if reversals else NOTHING_TO_TAKE_BACK
    if state == "held" and not reversals:
        return HELD
    return reversal_verdict(effects, reversals, state)


def refunded_first_verdict(calls: int, effects: int, reversals: int, state: str) -> str:
    """A payment refunded in full before any attempt: neither action may run for it."""
    if calls or effects:
        return "fulfilled after its refund"
    if reversals:
        return "reversal with nothing to take back"
    if state == "refunded_unfulfilled":
        return NOTHING_TO_TAKE_BACK
    return f"not refunded_unfulfilled ({state or 'unknown'})"
