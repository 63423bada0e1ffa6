"""The built-in SQLite downstream's own record of one payment, as people read it beside the
ledger's (ledger/downstream.py keeps its tables): its calls and orders, and the reversals
(REVERSAL_ACTION) it recorded."""

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from ledger.downstream import using
from ledger.read.base import View
from ledger.reversals import is_refulfil_key


class DownstreamRecord(View):
    calls: int
    applied: int
    already_applied: int
    effects: int
    regrants: int
    """Orders under its fulfilment again's key (``refulfil:``, after a dispute won): not
    effects of their own."""
    reversal_calls: int
    reversals: int
    reversed_at: datetime | None


def downstream_record(path: str, payment_key: str) -> DownstreamRecord | None:
    """One payment's calls and effects in the downstream's own tables (None: no file yet);
    DownstreamUnusable when its file cannot be read."""
    if not Path(path).exists():
        return None
    with using(path):
        return _record(path, payment_key)


def _record(path: str, payment_key: str) -> DownstreamRecord | None:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        calls: dict[str, int] = dict(
            db.execute(
                "SELECT outcome, COUNT(*) FROM calls WHERE payment_key = ? GROUP BY outcome",
                (payment_key,),
            ).fetchall()
        )
        keys = [
            k
            for (k,) in db.execute(
                "SELECT idempotency_key FROM orders WHERE payment_key = ?", (payment_key,)
            )
        ]
        reversal_calls, reversals, reversed_at = _reversals(db, payment_key)
    except sqlite3.OperationalError:  # the tables are created by the first call
        return None
    finally:
        db.close()
    return DownstreamRecord(
        calls=sum(calls.values()),
        applied=calls.get("applied", 0),
        already_applied=calls.get("already_applied", 0),
        effects=sum(not is_refulfil_key(k) for k in keys),
        regrants=sum(is_refulfil_key(k) for k in keys),
        reversal_calls=reversal_calls,
        reversals=reversals,
        reversed_at=datetime.fromtimestamp(reversed_at, UTC) if reversed_at else None,
    )


def _reversals(db: sqlite3.Connection, payment_key: str) -> tuple[int, int, float | None]:
    """Reversal calls, reversal keys and the order's ``reversed_at``; nothing in a file made
    before reversals were (its tables appear when the action next opens it)."""
    try:
        (calls,) = db.execute(
            "SELECT COUNT(*) FROM reversal_calls WHERE payment_key = ?", (payment_key,)
        ).fetchone()
        (keys,) = db.execute(
            "SELECT COUNT(*) FROM reversals WHERE payment_key = ?", (payment_key,)
        ).fetchone()
        (at,) = db.execute(
            "SELECT MAX(reversed_at) FROM orders WHERE payment_key = ?", (payment_key,)
        ).fetchone()
    except sqlite3.OperationalError:
        return 0, 0, None
    return calls, keys, at
