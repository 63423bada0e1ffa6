"""Two pieces of a shop's own fulfilment code, written against the typed API for action
authors (workers/api.py) and checked with ``mypy --strict`` by the suite
(tests/unit/test_api.py).

``grant_access`` is an action (``FULFILMENT_ACTION=examples.actions:grant_access``, with
``SHOP_DB`` naming a SQLite file): it grants access once per idempotency key, so it
declares itself replay-safe. ``grant_entitlement`` is an effect for the PostgreSQL action
(``FULFILMENT_ACTION=postgresql://…`` and ``FULFILMENT_EFFECT=examples.actions:
grant_entitlement``): it runs inside the transaction that records the payment's key, so it
needs no idempotency of its own.
"""

import os
import sqlite3
from typing import Any

from workers.api import DownstreamDown, GiveUp, Purchase, Receipt, RetryLater, replay_safe


@replay_safe
def grant_access(purchase: Purchase) -> Receipt:
    """One access row per payment, keyed by the idempotency key: a re-run changes nothing."""
    if purchase["amount"] is None:
        raise GiveUp(f"{purchase['payment_key']}: no amount paid")
    try:
        db = sqlite3.connect(os.environ["SHOP_DB"], timeout=1, isolation_level=None)
    except sqlite3.OperationalError as exc:  # the file cannot be opened: the shop is down
        raise DownstreamDown(f"shop database: {exc}", sent=False) from exc
    try:
        db.execute(
            "CREATE TABLE IF NOT EXISTS access (idempotency_key TEXT PRIMARY KEY, payment_key"
            " TEXT NOT NULL, amount INTEGER NOT NULL)"
        )
        granted = db.execute(
            "INSERT OR IGNORE INTO access VALUES (?, ?, ?)",
            (purchase["idempotency_key"], purchase["payment_key"], purchase["amount"]),
        ).rowcount
    except sqlite3.OperationalError as exc:  # locked by another writer: later
        raise RetryLater(f"shop database: {exc}") from exc
    finally:
        db.close()
    return {"granted": bool(granted), "payment": purchase["payment_key"]}


def grant_entitlement(conn: Any, purchase: Purchase) -> Receipt:
    """An entitlement row in the example shop's ``entitlements`` table
    (examples/shop/schema.sql; its FULFILMENT_SQL, grant.sql, does the same), in the action's
    transaction (``conn`` is psycopg's connection)."""
    if purchase["currency"] != "usd":
        raise GiveUp(f"{purchase['payment_key']}: only usd is sold here")
    row = conn.execute(
        "INSERT INTO entitlements (payment_key, client_reference_id, customer_email, product,"
        " amount, currency) VALUES (%(payment_key)s, %(client_reference_id)s,"
        " %(customer_email)s, 'pro-plan', %(amount)s, %(currency)s) RETURNING id",
        purchase,
    ).fetchone()
    return {"entitlement": row[0] if row else None}
