"""The built-in SQLite downstream (``FULFILMENT_ACTION=sqlite:///PATH``): every call logged,
the order row applied once per idempotency key, and the user's effect (FULFILMENT_SQL or
FULFILMENT_EFFECT, workers/effects.py) in the same transaction, as the PostgreSQL action
does in the user's own database: one setting moves a shop from one to the other."""

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ledger.downstream import BUSY_SECONDS, open_downstream
from ledger.purchase import idempotency_key
from ledger.reversals import ReversalCall
from workers.effects import Effect, Receipt, for_sqlite, purchase_of, sample_for, sql_params
from workers.exceptions import FulfilmentError, PermanentDownstreamError, TransientDownstreamError

RETRY_ERRORS = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_FULL", "SQLITE_NOMEM")
"""sqlite3 error names (``sqlite_errorname``, their extended codes too) that may pass later:
another writer, the disk. Any other error the effect raises (a constraint, a missing table,
a type) is the effect's own failure."""


BUSY_SHARE = 0.8
"""Of FULFILMENT_TIMEOUT, how long a call waits for another writer's lock."""


class SqliteAction:
    """A real order table (and the user's effect) in one SQLite transaction per call."""

    replay_safe = True

    def __init__(self, path: str, effect: Effect | None = None, timeout: float = 0.0) -> None:
        self.path = path
        self.effect = effect
        # Waiting for another writer's lock is C code no deadline in Python interrupts: it
        # ends inside the call's FULFILMENT_TIMEOUT (SQLITE_BUSY, retried), not by the
        # watchdog ending the worker process.
        self.busy_seconds = timeout * BUSY_SHARE if timeout else BUSY_SECONDS
        self._db: tuple[int, sqlite3.Connection] | None = None

    def connection(self) -> sqlite3.Connection:
        """One connection per process (opened again after a fork, within a call: its
        opening waits no longer than a call's statements)."""
        if self._db is None or self._db[0] != os.getpid():
            self._db = (os.getpid(), open_downstream(self.path, self.busy_seconds))
        return self._db[1]

    def __call__(self, purchase: Any) -> Receipt:
        if isinstance(purchase, ReversalCall):
            return self.reverse(purchase)
        p = sql_params(purchase)
        now = time.time()
        with self._transaction() as db:
            if _voided(db, p["idempotency_key"]):
                raise PermanentDownstreamError(VOIDED)
            inserted = db.execute(
                "INSERT OR IGNORE INTO orders (idempotency_key, payment_key, amount, currency,"
                " token, at, client_reference_id, customer, purchase)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    p["idempotency_key"],
                    p["payment_key"],
                    p["amount"],
                    p["currency"],
                    p["token"],
                    now,
                    p.get("client_reference_id"),
                    p.get("customer"),
                    json.dumps(purchase_of(purchase), sort_keys=True),
                ),
            ).rowcount
            outcome = "applied" if inserted else "already_applied"
            key = p["idempotency_key"]
            receipt = self._effect(db, purchase, key) if inserted else self._first_receipt(db, key)
            row = db.execute(
                "INSERT INTO calls (payment_key, idempotency_key, token, at, outcome)"
                " VALUES (?, ?, ?, ?, ?)",
                (p["payment_key"], key, p["token"], now, outcome),
            )
        found = {"outcome": outcome, "call_id": row.lastrowid}
        return found if self.effect is None else {**found, "receipt": receipt}

    def settle(self, purchase: Any) -> Receipt:
        """After an attempt that may have applied, the payment taken back: its order found
        (``already_applied``, with the first receipt) or, absent, its key voided in the same
        transaction (``voided``), so no attempt can apply it after (the write lock orders
        this against any call's own)."""
        p = sql_params(purchase)
        key = p["idempotency_key"]
        with self._transaction() as db:
            found = db.execute("SELECT 1 FROM orders WHERE idempotency_key = ?", (key,))
            if found.fetchone() is not None:
                receipt = {"outcome": "already_applied", "receipt": self._first_receipt(db, key)}
            else:
                db.execute(
                    "INSERT OR IGNORE INTO voids (idempotency_key, payment_key, token, at)"
                    " VALUES (?, ?, ?, ?)",
                    (key, p["payment_key"], p["token"], time.time()),
                )
                receipt = {"outcome": "voided"}
        return receipt

    def reverse(self, call: ReversalCall) -> Receipt:
        """The reversal: its key recorded once, its amount added to the order's
        ``reversed_amount`` (``reversed_at`` once that reaches the order's amount, or at
        once for a reversal of the whole payment or what remains: one fulfilled before its
        amount was known has none) and REVERSAL_SQL run, in one transaction; each call
        logged."""
        amount = call.reversal.amount
        now = time.time()
        with self._transaction() as db:
            inserted = db.execute(
                "INSERT OR IGNORE INTO reversals (idempotency_key, payment_key, token, at,"
                " reversal) VALUES (?, ?, ?, ?, ?)",
                (
                    call.idempotency_key,
                    call.payment_key,
                    call.token,
                    now,
                    json.dumps(purchase_of(call)["reversal"], sort_keys=True),
                ),
            ).rowcount
            outcome = "applied" if inserted else "already_applied"
            key = call.idempotency_key
            if inserted:
                db.execute(  # an amount not known (None) is what remains: all of it
                    "UPDATE orders SET reversed_amount = COALESCE(reversed_amount, 0)"
                    " + COALESCE(:amount, 0), reversed_at = CASE WHEN :refund IS NULL"
                    " OR COALESCE(reversed_amount, 0) + :amount >= amount"
                    " THEN :now ELSE reversed_at END"
                    " WHERE payment_key = :pk AND idempotency_key = :key",
                    {
                        "amount": amount,
                        "refund": call.reversal.refund_id,
                        "now": now,
                        "pk": call.payment_key,
                        "key": idempotency_key(call.payment_key),
                    },
                )
            receipt = self._effect(db, call, key) if inserted else self._first_receipt(db, key)
            row = db.execute(
                "INSERT INTO reversal_calls (payment_key, token, at, outcome) VALUES (?, ?, ?, ?)",
                (call.payment_key, call.token, now, outcome),
            )
        found = {"outcome": outcome, "call_id": row.lastrowid}
        return found if self.effect is None else {**found, "receipt": receipt}

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, the write lock taken first (BEGIN IMMEDIATE), committed
        when the block ends. A SQLite error is transient: nothing was committed (SQLite
        transactions are atomic); whatever else ends the block, the call's deadline too,
        rolls it back."""
        db = self.connection()
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise TransientDownstreamError(f"sqlite: {exc}") from exc
        finally:
            if db.in_transaction:
                db.rollback()

    def _effect(self, db: sqlite3.Connection, call: Any, key: str) -> Receipt | None:
        """The user's effect, its receipt kept with the key; its errors said as whose."""
        if self.effect is None:
            return None
        try:
            receipt = self.effect.run(db, call, sqlite=True)
        except sqlite3.Error as exc:
            name = getattr(exc, "sqlite_errorname", "")
            if name.startswith(RETRY_ERRORS):
                raise
            raise PermanentDownstreamError(f"sqlite: the effect failed: {exc}") from exc
        except FulfilmentError:  # the effect's own word (workers/api.py)
            raise
        except Exception as exc:  # the effect's bug: rolled back, nothing applied
            why = f"sqlite: the effect raised {self.effect.raised(exc, call)}"
            raise TransientDownstreamError(why) from exc
        db.execute("INSERT INTO receipts VALUES (?, ?)", (key, json.dumps(receipt)))
        return receipt

    def _first_receipt(self, db: sqlite3.Connection, key: str) -> Receipt | None:
        if self.effect is None:
            return None
        found = db.execute(
            "SELECT receipt FROM receipts WHERE idempotency_key = ?", (key,)
        ).fetchone()
        return json.loads(found[0]) if found else None


VOIDED = "sqlite: voided: the payment was taken back before this key applied"


def _voided(db: sqlite3.Connection, key: str) -> bool:
    found = db.execute("SELECT 1 FROM voids WHERE idempotency_key = ?", (key,))
    return found.fetchone() is not None


def problem(
    path: str, effect: Effect | None, setting: str = "FULFILMENT_ACTION"
) -> tuple[str, str] | None:
    """Why the SQLite downstream ``setting`` names cannot run (the setting to change, what is
    wrong), or None: its file created and writable, its effect's SQL (FULFILMENT_SQL,
    REVERSAL_SQL) compiled by SQLite (EXPLAIN, never run). An unwritable file raises."""
    db = open_downstream(path)
    try:
        db.execute("BEGIN IMMEDIATE")  # takes the write lock: refused if read-only
        db.rollback()
        if effect is not None and effect.sql:
            try:
                db.execute("EXPLAIN " + for_sqlite(effect.sql), sql_params(sample_for(effect)))
            except sqlite3.Error as exc:
                return effect.setting, f"SQLite refuses it: {type(exc).__name__}: {exc}"
    finally:
        db.close()
    return None
