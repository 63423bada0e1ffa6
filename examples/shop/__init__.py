"""An example shop that fulfils into its own PostgreSQL: the service's PostgreSQL action
(``FULFILMENT_ACTION=postgresql://…``, ``FULFILMENT_SQL=@examples/shop/grant.sql``) grants an
entitlement per paid purchase, its reversal (``REVERSAL_SQL=@examples/shop/revoke.sql``)
revokes it when the money goes back, and this Flask app is Checkout's landing page: the
``success_url`` ``http://127.0.0.1:5000/?session_id={CHECKOUT_SESSION_ID}`` shows the buyer
what that session bought (the session id is the buyer's secret, as in Stripe's fulfilment
guide, so no login and no lookup by email or order reference, which anyone could type),
revoked ones marked, and how much of one still granted was refunded (with
``REVERSAL_PER_REFUND=true`` each partial refund's reversal adds its amount to
``reversed_amount``; without it only a refund in full reaches the shop).
``examples/shop/run.sh`` runs it all; ``python -m examples.shop migrate`` makes the shop's
table and the service's.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
from flask import Flask, render_template, request
from psycopg.rows import dict_row

from ledger.money import format_minor
from workers.postgres_schema import migrate as migrate_service_table

SCHEMA = Path(__file__).with_name("schema.sql")
LOOKUP = """
SELECT product, payment_key, amount, currency, granted_at, reversed_amount, revoked_at
FROM entitlements
WHERE checkout_session_id = %(session_id)s
ORDER BY granted_at
"""


def money(minor_units: int | None, currency: str | None) -> str:
    """An amount in Stripe's minor units as people read it: 12000 usd, '120.00 USD'."""
    if minor_units is None:
        return "not known"
    return format_minor(minor_units, currency) if currency else f"{minor_units} minor units"


def part_of(part: int, whole: int | None, currency: str | None) -> str:
    """A part of the amount paid, its currency said once: '30.00 of 120.00 USD'."""
    if whole is None or not currency:
        return money(part, currency)
    number = money(part, currency).removesuffix(f" {currency.upper()}")
    return f"{number} of {money(whole, currency)}"


def create_app(test_config: Mapping[str, Any] | None = None) -> Flask:
    """The shop: ``SHOP_DATABASE_URL`` (or ``test_config["DATABASE_URL"]``) is its database."""
    app = Flask(__name__)
    app.config.from_prefixed_env("SHOP")
    app.config.update(test_config or {})
    app.jinja_env.globals.update(money=money, part_of=part_of)

    @app.get("/")
    def entitlements() -> str:
        session_id = request.args.get("session_id", "").strip()
        found: list[dict[str, Any]] = []
        if session_id:
            with psycopg.connect(app.config["DATABASE_URL"], row_factory=dict_row) as conn:
                found = conn.execute(LOOKUP, {"session_id": session_id}).fetchall()
        return render_template("entitlements.html", session_id=session_id, entitlements=found)

    return app


def migrate(url: str) -> None:
    """The shop's table (schema.sql) and the service's own (webhook_ledger_effects)."""
    with psycopg.connect(url) as conn:
        conn.execute(SCHEMA.read_text())
    migrate_service_table(url)
