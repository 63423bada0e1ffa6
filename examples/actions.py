"""Two pieces of a shop's own fulfilment code, written against the typed API for action
authors (workers/api.py) and checked with ``mypy --strict`` by the suite
(tests/unit/test_api.py).

``grant_access`` is an action (``FULFILMENT_ACTION=examples.actions:grant_access``, with
``SHOP_DB`` naming a SQLite file): it grants access once per idempotency key, so it
declares itself replay-safe. ``grant_entitlement`` is an effect for the PostgreSQL action
(``FULFILMENT_ACTION=postgresql://…`` and ``FULFILMENT_EFFECT=examples.actions:
grant_entitlement``): it runs inside the transaction that records the payment's key, so it
needs no idempotency of its own.

``grant_items`` and ``take_back_items`` are the same for a grant per line item
(``FULFILMENT_EFFECT=examples.actions:grant_items``, ``REVERSAL_EFFECT=examples.actions:
take_back_items``) into a table of your own, ``item_grants (payment_key text, line_item text
PRIMARY KEY, price_lookup_key text, quantity int, revoked_at timestamptz)``: a refund whose
metadata names a line item (``{"line_item": "li_…"}``, set when you refund it, with
REVERSAL_PER_REFUND) takes back that item alone; any other reversal (a refund in full, a
dispute lost, what remains) takes back every item of the payment.
"""

import os
import sqlite3
from typing import Any

from workers.api import (
    DownstreamDown,
    GiveUp,
    Purchase,
    Receipt,
    RetryLater,
    ReversalCall,
    replay_safe,
)


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


def grant_items(conn: Any, purchase: Purchase) -> Receipt:
    """One grant per Checkout line item (CHECKOUT_LINE_ITEMS reads them), keyed by Stripe's
    line item id, in the action's transaction."""
    items = purchase["line_items"]
    if not items:
        raise GiveUp(f"{purchase['payment_key']}: no line items (set CHECKOUT_LINE_ITEMS)")
    for item in items:
        conn.execute(
            "INSERT INTO item_grants (payment_key, line_item, price_lookup_key, quantity)"
            " VALUES (%s, %s, %s, %s)",
            (purchase["payment_key"], item["id"], item["price_lookup_key"], item["quantity"]),
        )
    return {"granted": [item["id"] for item in items]}


def take_back_items(conn: Any, call: ReversalCall) -> Receipt:
    """What the refund names (its metadata's ``line_item``), else every item of the payment,
    revoked in the reversal's transaction: once per reversal key."""
    reversal = call["reversal"]
    named = (reversal["refund_metadata"] or {}).get("line_item")
    revoked = conn.execute(
        "UPDATE item_grants SET revoked_at = now() WHERE payment_key = %s"
        " AND revoked_at IS NULL AND (%s::text IS NULL OR line_item = %s) RETURNING line_item",
        (call["payment_key"], named, named),
    ).fetchall()
    return {"revoked": sorted(row[0] for row in revoked), "why": reversal["why"]}
