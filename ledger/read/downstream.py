"""The built-in SQLite downstream's own record of one payment, as people read it beside the
ledger's (ledger/downstream.py keeps its tables)."""

import sqlite3
from pathlib import Path

from ledger.read.base import View


class DownstreamRecord(View):
    calls: int
    applied: int
    already_applied: int
    effects: int


def downstream_record(path: str, payment_key: str) -> DownstreamRecord | None:
    """One payment's calls and effects in the downstream's own tables (None: no file yet)."""
    if not Path(path).exists():
        return None
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        calls: dict[str, int] = dict(
            db.execute(
                "SELECT outcome, COUNT(*) FROM calls WHERE payment_key = ? GROUP BY outcome",
                (payment_key,),
            ).fetchall()
        )
        (effects,) = db.execute(
            "SELECT COUNT(*) FROM orders WHERE payment_key = ?", (payment_key,)
        ).fetchone()
    except sqlite3.OperationalError:  # the tables are created by the first call
        return None
    finally:
        db.close()
    return DownstreamRecord(
        calls=sum(calls.values()),
        applied=calls.get("applied", 0),
        already_applied=calls.get("already_applied", 0),
        effects=effects,
    )
