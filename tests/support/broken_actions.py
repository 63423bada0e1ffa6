"""Deliberately broken downstream actions, so the checker can be seen to catch them."""

import os
import time
from typing import Any

from workers.actions import open_downstream


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
                "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)",
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
