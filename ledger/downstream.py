"""The built-in SQLite downstream's own tables: the schema the action writes (workers) and
what the dashboard, the CLI, bundles and the replay report read back, an independent record
of effects. ``receipts`` keeps what the user's effect (FULFILMENT_SQL, FULFILMENT_EFFECT)
returned, per key, for a re-run to answer."""

import hashlib
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ledger.reversals import is_refulfil_key

BUSY_SECONDS = 10.0
"""How long the order system waits for another connection's write lock."""


def downstream_name(path: str) -> str:
    """The file's name as a payment's ``called_on`` keeps it (workers.actions.downstream_of)."""
    return "sqlite:" + short_digest(os.path.realpath(path))


def short_digest(text: str) -> str:
    """How ``called_on`` names a downstream without its address or credentials."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class DownstreamUnusable(Exception):
    """The built-in downstream's file cannot be opened, made or read (not a database, a
    directory that cannot be made). ``str()`` names it by :func:`downstream_name`, for the
    web; ``path`` and ``why`` are for the CLI, whose user set the path."""

    def __init__(self, path: str | Path, exc: Exception) -> None:
        self.path = str(path)
        self.why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        super().__init__(f"the downstream {downstream_name(self.path)} cannot be used: {self.why}")


@contextmanager
def using(path: str | Path) -> Iterator[None]:
    """Raise :class:`DownstreamUnusable` for what SQLite or the file system refuse inside."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        raise DownstreamUnusable(path, exc) from exc


SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    payment_key TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    token INTEGER NOT NULL,
    at REAL NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('applied', 'already_applied'))
);
CREATE TABLE IF NOT EXISTS orders (
    idempotency_key TEXT PRIMARY KEY,
    payment_key TEXT NOT NULL,
    amount INTEGER,
    currency TEXT,
    token INTEGER NOT NULL,
    at REAL NOT NULL,
    client_reference_id TEXT,
    customer TEXT,
    purchase TEXT,
    reversed_at REAL,
    reversed_amount INTEGER
);
CREATE TABLE IF NOT EXISTS receipts (
    idempotency_key TEXT PRIMARY KEY,
    receipt TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS calls_by_payment ON calls (payment_key);
CREATE TABLE IF NOT EXISTS reversals (
    idempotency_key TEXT PRIMARY KEY,
    payment_key TEXT NOT NULL,
    token INTEGER NOT NULL,
    at REAL NOT NULL,
    reversal TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS voids (
    idempotency_key TEXT PRIMARY KEY,
    payment_key TEXT NOT NULL,
    token INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS reversal_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    payment_key TEXT NOT NULL,
    token INTEGER NOT NULL,
    at REAL NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('applied', 'already_applied'))
);
"""

ADDED_ORDER_COLUMNS = {
    "client_reference_id": "TEXT",
    "customer": "TEXT",
    "purchase": "TEXT",
    "reversed_at": "REAL",
    "reversed_amount": "INTEGER",
}
"""Columns of ``orders`` a file made before them lacks: added when it is opened. ``purchase``
is the whole purchase (ledger/purchase.py) as JSON; ``reversed_amount`` what its reversals
(REVERSAL_ACTION; one per refund with REVERSAL_PER_REFUND) took back, each added in the
transaction that recorded the reversal's key in ``reversals``, and ``reversed_at`` when that
reached the order's amount or a reversal of the whole payment or what remains was recorded
(each reversal call is logged in ``reversal_calls``)."""


def open_downstream(path: str | Path, busy_seconds: float = BUSY_SECONDS) -> sqlite3.Connection:
    """The SQLite order system, created on first use (WAL, so readers never block it);
    each wait for another connection's write lock ends after ``busy_seconds``."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=busy_seconds, isolation_level=None)
    _into_wal(db, busy_seconds)
    db.executescript(SCHEMA)
    _add_columns(db)
    return db


def _add_columns(db: sqlite3.Connection) -> None:
    """Bring an older file's ``orders`` up to SCHEMA, once, under the write lock (another
    worker may be doing the same)."""
    if _missing_columns(db):
        db.execute("BEGIN IMMEDIATE")
        try:
            for name in _missing_columns(db):
                db.execute(f"ALTER TABLE orders ADD COLUMN {name} {ADDED_ORDER_COLUMNS[name]}")
            db.execute("COMMIT")
        finally:
            if db.in_transaction:
                db.rollback()


def _missing_columns(db: sqlite3.Connection) -> list[str]:
    have = {row[1] for row in db.execute("PRAGMA table_info(orders)")}
    return [name for name in ADDED_ORDER_COLUMNS if name not in have]


def _into_wal(db: sqlite3.Connection, busy_seconds: float) -> None:
    """WAL mode, waiting for another process that holds the write lock: SQLite answers this
    PRAGMA "database is locked" at once instead of calling its busy handler, so two workers
    starting together on a new file failed (one refused to start)."""
    deadline = time.monotonic() + busy_seconds
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _empty() -> dict[str, int]:
    return {"calls": 0, "applied": 0, "already_applied": 0, "effects": 0}


def read_downstream(path: str) -> dict[str, Any]:
    """Calls and applied effects per payment, plus totals. An order under a fulfilment
    again's key (``refulfil:{payment_key}``, REVERSAL_DISPUTE_WON=fulfil) is the payment's
    re-grant after its reversal, counted apart (``regrants``, present only when there are
    some), not a second effect."""
    if not Path(path).exists():
        return {"totals": {"calls": 0, "effects": 0}, "payments": {}}
    with using(path):
        payments = _per_payment(path)
    totals = {
        "calls": sum(r["calls"] for r in payments.values()),
        "effects": sum(r["effects"] for r in payments.values()),
    }
    regrants = sum(r.get("regrants", 0) for r in payments.values())
    if regrants:
        totals["regrants"] = regrants
    return {"totals": totals, "payments": dict(sorted(payments.items()))}


def _per_payment(path: str) -> dict[str, dict[str, int]]:
    db = open_downstream(path)
    try:
        payments: dict[str, dict[str, int]] = {}
        for key, outcome, count in db.execute(
            "SELECT payment_key, outcome, COUNT(*) FROM calls GROUP BY payment_key, outcome"
        ):
            row = payments.setdefault(key, _empty())
            row["calls"] += count
            row[outcome] += count
        for key, idempotency_key in db.execute("SELECT payment_key, idempotency_key FROM orders"):
            row = payments.setdefault(key, _empty())
            kind = "regrants" if is_refulfil_key(idempotency_key) else "effects"
            row[kind] = row.get(kind, 0) + 1
    finally:
        db.close()
    return payments


def read_tables(path: str) -> dict[str, list[dict[str, Any]]]:
    """Every call and order, and every reversal and reversal call, as stored (read-only),
    for evidence bundles (a file made before reversals has none)."""
    with using(path):
        return _tables(path)


def _tables(path: str) -> dict[str, list[dict[str, Any]]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {
            "calls": [dict(r) for r in db.execute("SELECT * FROM calls ORDER BY id")],
            "orders": [dict(r) for r in db.execute("SELECT * FROM orders ORDER BY payment_key")],
            "reversals": [
                dict(r) for r in db.execute("SELECT * FROM reversals ORDER BY idempotency_key")
            ]
            if "reversals" in tables
            else [],
            "reversal_calls": [
                dict(r) for r in db.execute("SELECT * FROM reversal_calls ORDER BY id")
            ]
            if "reversal_calls" in tables
            else [],
        }
    finally:
        db.close()
