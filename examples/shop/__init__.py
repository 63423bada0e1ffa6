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
As Stripe's guide asks of a landing page, the page also triggers the fulfilment itself
(``SHOP_SERVICE_URL``, ``SHOP_OPS_TOKEN``: the service's landing-page trigger,
``POST /ops/api/checkout-sessions/{id}/fulfil``), so the buyer does not wait for a webhook,
and finds the entitlement by the payment the service names too: one granted before the
session's event came has no session id. Without them the page reads the shop's table only.
``examples/shop/run.sh`` runs it all (the local ops token; in production give the shop a
token of its own, ``OPS_TOKEN_LABELS``); ``python -m examples.shop migrate`` makes the
shop's table and the service's.
"""

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import requests
from flask import Flask, render_template, request
from psycopg.rows import dict_row

from ledger.money import format_minor
from workers.postgres_schema import migrate as migrate_service_table

SCHEMA = Path(__file__).with_name("schema.sql")
LOOKUP = """
SELECT product, payment_key, amount, currency, granted_at, reversed_amount, revoked_at
FROM entitlements
WHERE checkout_session_id = %(session_id)s OR payment_key = %(payment_key)s
ORDER BY granted_at
"""
TRIGGER = "/ops/api/checkout-sessions/{}/fulfil"
SESSION_ID = re.compile(r"cs_[A-Za-z0-9_]{1,255}")


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
        service: dict[str, Any] = {}
        if session_id:
            service = fulfil_session(app.config, session_id)
            named = {"session_id": session_id, "payment_key": service.get("payment_key")}
            with psycopg.connect(app.config["DATABASE_URL"], row_factory=dict_row) as conn:
                found = conn.execute(LOOKUP, named).fetchall()
        return render_template(
            "entitlements.html", session_id=session_id, entitlements=found, service=service
        )

    return app


def fulfil_session(config: Mapping[str, Any], session_id: str) -> dict[str, Any]:
    """The service's answer to its landing-page trigger for ``session_id`` (its payment's
    key and state, or the refusal's ``error`` and ``message``); {} when the shop has no
    SERVICE_URL and OPS_TOKEN, or the service did not answer."""
    if not (config.get("SERVICE_URL") and config.get("OPS_TOKEN")):
        return {}
    if not SESSION_ID.fullmatch(session_id):  # a buyer's typing never reaches another route
        return {"error": "unknown_session"}
    url = config["SERVICE_URL"].rstrip("/") + TRIGGER.format(quote(session_id, safe=""))
    headers = {"Authorization": f"Bearer {config['OPS_TOKEN']}"}
    try:
        answer = requests.post(url, headers=headers, timeout=10, allow_redirects=False)
        body = answer.json()
    except (requests.RequestException, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def migrate(url: str) -> None:
    """The shop's table (schema.sql) and the service's own (webhook_ledger_effects)."""
    with psycopg.connect(url) as conn:
        conn.execute(SCHEMA.read_text())
    migrate_service_table(url)
