"""Deliberately broken downstream actions, so the checker can be seen to catch them."""

import os
import sqlite3
import sys
import time
from typing import Any

import requests

from ledger.downstream import open_downstream
from ledger.reversals import is_refulfil_key


def exit_worker(call: dict[str, Any]) -> dict[str, Any]:
    """A poison payment: calling it kills the worker process outright."""
    os._exit(1)


def apply_twice(call: dict[str, Any]) -> dict[str, Any]:
    """Applies two order rows per call (a downstream that ignores the idempotency key)."""
    db = open_downstream(os.environ["BROKEN_DB"])
    try:
        for copy in (1, 2):
            _apply(db, call, f"{call['idempotency_key']}#{copy}")
    finally:
        db.close()
    return {"broken": True}


def regrant_twice(call: dict[str, Any]) -> dict[str, Any]:
    """Applies a payment's fulfilment once by its key, but a fulfilment again after a dispute
    won (``refulfil:{payment_key}``) as two order rows (a downstream that ignores that key)."""
    key = call["idempotency_key"]
    db = open_downstream(os.environ["BROKEN_DB"])
    try:
        for copy in (key, f"{key}#2") if is_refulfil_key(key) else (key,):
            _apply(db, call, copy, "INSERT OR IGNORE")
    finally:
        db.close()
    return {"broken": True}


def _apply(db: sqlite3.Connection, call: dict[str, Any], key: str, insert: str = "INSERT") -> None:
    """One order row under ``key`` (``INSERT OR IGNORE``: none if it has one) and the call."""
    db.execute(
        f"{insert} INTO orders (idempotency_key, payment_key, amount, currency, token, at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (key, call["payment_key"], call["amount"], call["currency"], call["token"], time.time()),
    )
    db.execute(
        "INSERT INTO calls (payment_key, idempotency_key, token, at, outcome)"
        " VALUES (?, ?, ?, ?, 'applied')",
        (call["payment_key"], key, call["token"], time.time()),
    )


def insert_order(call: dict[str, Any]) -> dict[str, Any]:
    """One SQLite INSERT into the shop's own database (``SHOP_DB``), which waits up to 30 s
    for another process's lock: the wait is inside C code, where no signal reaches Python.
    Applied once per payment (``INSERT OR IGNORE``), so it is also fit to be replay-safe."""
    db = sqlite3.connect(os.environ["SHOP_DB"], timeout=30, isolation_level=None)
    try:
        db.execute(
            "INSERT OR IGNORE INTO orders (payment_key, token) VALUES (?, ?)",
            (call["payment_key"], call["token"]),
        )
    finally:
        db.close()
    return {"inserted": call["payment_key"]}


def insert_every_call(call: dict[str, Any]) -> dict[str, Any]:
    """A new order row in ``SHOP_DB`` on every call, whatever its idempotency key: not
    idempotent, so fit to be run at most once (not replay-safe)."""
    db = sqlite3.connect(os.environ["SHOP_DB"], timeout=30, isolation_level=None)
    try:
        db.execute(
            "INSERT INTO orders (payment_key, token) VALUES (?, ?)",
            (call["payment_key"], call["token"]),
        )
    finally:
        db.close()
    return {"inserted": call["payment_key"]}


def insert_every_call_declared_safe(call: dict[str, Any]) -> dict[str, Any]:
    """The same non-idempotent insert, wrongly declared replay-safe: the prover must catch it."""
    return insert_every_call(call)


insert_every_call_declared_safe.replay_safe = True  # type: ignore[attr-defined]


def revoke_every_call(call: dict[str, Any]) -> dict[str, Any]:
    """A reversal that takes the effect back with a new row in ``SHOP_DB``'s ``revokes`` on
    every call, whatever its idempotency key: fit to be run at most once (not replay-safe)."""
    db = sqlite3.connect(os.environ["SHOP_DB"], timeout=30, isolation_level=None)
    try:
        db.execute(
            "INSERT INTO revokes (payment_key, token) VALUES (?, ?)",
            (call["payment_key"], call["token"]),
        )
    finally:
        db.close()
    return {"revoked": call["payment_key"]}


def revoke_every_call_declared_safe(call: dict[str, Any]) -> dict[str, Any]:
    """The same non-idempotent reversal, wrongly declared replay-safe: the prover must
    catch it."""
    return revoke_every_call(call)


revoke_every_call_declared_safe.replay_safe = True  # type: ignore[attr-defined]


def make_every_call_shop(path: str) -> str:
    """``SHOP_DB`` for insert_every_call and revoke_every_call: tables with no unique key."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE orders (payment_key TEXT NOT NULL, token INTEGER)")
        db.execute("CREATE TABLE revokes (payment_key TEXT NOT NULL, token INTEGER)")
    return path


def orders_of(payment_key: str) -> int:
    """The effects probe (``--effects``) for insert_every_call: its rows for one payment."""
    with sqlite3.connect(os.environ["SHOP_DB"], timeout=30) as db:
        row = db.execute("SELECT count(*) FROM orders WHERE payment_key = ?", (payment_key,))
        return int(row.fetchone()[0])


def revokes_of(payment_key: str) -> int:
    """The reversals probe (``--reversals``) for revoke_every_call: its rows for one
    payment."""
    with sqlite3.connect(os.environ["SHOP_DB"], timeout=30) as db:
        row = db.execute("SELECT count(*) FROM revokes WHERE payment_key = ?", (payment_key,))
        return int(row.fetchone()[0])


def reverse_twice(call: dict[str, Any]) -> dict[str, Any]:
    """A reversal recorded twice per call under two keys (a downstream that ignores the
    reversal's idempotency key), in the built-in downstream's ``reversals`` table."""
    db = open_downstream(os.environ["BROKEN_DB"])
    try:
        for copy in (1, 2):
            db.execute(
                "INSERT INTO reversals (idempotency_key, payment_key, token, at, reversal)"
                " VALUES (?, ?, ?, ?, '{}')",
                (f"{call['idempotency_key']}#{copy}", call["payment_key"], call["token"], 0.0),
            )
            db.execute(
                "INSERT INTO reversal_calls (payment_key, token, at, outcome)"
                " VALUES (?, ?, ?, 'applied')",
                (call["payment_key"], call["token"], time.time()),
            )
    finally:
        db.close()
    return {"broken": True}


def exit_in_action(call: dict[str, Any]) -> dict[str, Any]:
    """Merchant code that calls ``sys.exit()`` (SystemExit, exit code 0) in the action."""
    sys.exit()


def interrupt_in_action(call: dict[str, Any]) -> dict[str, Any]:
    """Merchant code that raises KeyboardInterrupt in the action."""
    raise KeyboardInterrupt


def post_without_abort(call: dict[str, Any]) -> dict[str, Any]:
    """POSTs the call to ``DOWNSTREAM_URL`` and reads its whole answer, with no ``abort``
    and no deadline of its own: an answer that trickles in keeps it running past its
    deadline, until the watchdog ends its process."""
    answer = requests.post(
        os.environ["DOWNSTREAM_URL"],
        json={"payment_key": call["payment_key"]},
        headers={"Idempotency-Key": call["idempotency_key"]},
        timeout=60,
    )
    answer.raise_for_status()
    return {"status": answer.status_code, "body": answer.text[:200]}
