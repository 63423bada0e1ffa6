"""How ``webhook-ledger prove-action`` counts a payment's effects, and what a count means.

A probe answers the number of effects in the downstream for one payment key: the user's
``--effects module:function``, the user's ``--effects-sql`` (psycopg's named parameters,
``%(payment_key)s``, also for SQLite) on ``--effects-db`` or the action's own database, or,
for the built-in downstreams, their own table: SQLite's ``orders``, PostgreSQL's
``webhook_ledger_effects`` (one row per applied key, written with the effect; a key a
settlement voided is none).
"""

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from ledger.settings import Settings
from workers.effects import imported
from workers.exceptions import ActionConfigError
from workers.postgres_schema import TABLE

Probe = Callable[[str], int]

BUILT_IN = {
    "sqlite": "SELECT count(*) FROM orders WHERE payment_key = %(payment_key)s",
    "postgresql": (
        f"SELECT count(*) FROM {TABLE} WHERE payment_key = %(payment_key)s AND voided_at IS NULL"
    ),
}
PASSING = ("exactly once", "at most once (interrupted)", "skipped")


class NoProbe(Exception):
    """Effects cannot be counted for this action: the option to give, in words."""


def probe_for(s: Settings, effects: str | None, sql: str | None, db: str | None) -> Probe:
    """The probe the options name, else the built-in downstream's."""
    if effects:
        try:
            found: Probe = imported(effects, "--effects")
        except ActionConfigError as exc:
            raise NoProbe(f"--effects: {exc}") from exc
        return lambda key: int(found(key))
    spec = s.FULFILMENT_ACTION
    url = db or (f"{spec.scheme}:///{spec.target}" if spec.scheme == "sqlite" else spec.target)
    statement = sql or BUILT_IN.get(spec.scheme if not db else "")
    if statement is None:
        raise NoProbe(
            f"FULFILMENT_ACTION is a {spec.scheme} action: give --effects module:function or"
            " --effects-sql (with --effects-db) to count its effects"
        )
    if url.startswith("sqlite:///"):
        return sqlite_probe(url.removeprefix("sqlite:///"), statement)
    if url.startswith(("postgresql://", "postgres://")):
        return postgres_probe(url, statement)
    raise NoProbe("--effects-db: expected sqlite:///path or postgresql://…")


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
