"""Deliberately broken downstream actions, so the checker can be seen to catch them."""

import os
import sqlite3
import time
from typing import Any

from ledger.downstream import open_downstream


def exit_worker(call: dict[str, Any]) -> dict[str, Any]:
    """A poison payment: calling it kills the worker process outright."""
    os._exit(1)


def apply_twice(call: dict[str, Any]) -> dict[str, Any]:
    """Applies two order rows per call (a downstream that ignores the idempotency key)."""
    db = open_downstream(os.environ["BROKEN_DB"])
    try:
        for copy in (1, 2):
            key = f"{call['idempotency_key']}#{copy}"
            db.execute(
                "INSERT INTO orders (idempotency_key, payment_key, amount, currency, token, at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    key,
                    call["payment_key"],
                    call["amount"],
                    call["currency"],
                    call["token"],
                    time.time(),
                ),
            )
            db.execute(
                "INSERT INTO calls (payment_key, idempotency_key, token, at, outcome)"
                " VALUES (?, ?, ?, ?, 'applied')",
                (call["payment_key"], key, call["token"], time.time()),
            )
    finally:
        db.close()
    return {"broken": True}


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
