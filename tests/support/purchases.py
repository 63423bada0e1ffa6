"""A Checkout purchase as Stripe sends it, with what a merchant's fulfilment needs: the
session's ``client_reference_id``, metadata on the session and on the PaymentIntent (not the
same), the buyer's email and name; the line items and invoice lines Stripe's API lists; and
the Purchase schema of webhook/openapi.yaml."""

import random
from pathlib import Path
from typing import Any

import jsonschema_rs
import yaml

import webhook
from ledgerctl import samples

SPEC = Path(webhook.__file__).parent / "openapi.yaml"
ORDER = "order_4711"
EMAIL = "jenny.rosen@example.com"
NAME = "Jenny Rosen"


def checkout_purchase(rng: random.Random) -> list[dict[str, Any]]:
    """payment_intent.created, charge.succeeded, payment_intent.succeeded and
    checkout.session.completed of one Checkout payment, in Stripe's order."""
    events = samples.payment_events(rng, checkout=True)
    session = events[3]["data"]["object"]
    session.update(client_reference_id=ORDER, metadata={"order": ORDER, "source": "session"})
    session["customer_details"].update(email=EMAIL, name=NAME)
    for intent in (events[0], events[2]):
        intent["data"]["object"]["metadata"] = {"source": "payment_intent"}
    return events


def purchase_validator() -> Any:
    """A JSON Schema validator of ``components/schemas/Purchase`` as published."""
    spec = yaml.safe_load(SPEC.read_text())
    schema = {"$ref": "#/components/schemas/Purchase", "components": spec["components"]}
    return jsonschema_rs.validator_for(schema)


def line_items(count: int, session_id: str) -> list[dict[str, Any]]:
    """``count`` line items of a session as Stripe's API lists them (``item`` objects with
    their price expanded, as the list endpoint answers them)."""
    tail = session_id[-8:]
    return [
        {
            "id": f"li_{tail}{i:06d}",
            "object": "item",
            "amount_discount": 0,
            "amount_subtotal": 500 * (i % 3 + 1),
            "amount_tax": 0,
            "amount_total": 500 * (i % 3 + 1),
            "currency": "usd",
            "description": f"Sticker #{i}",
            "price": {
                "id": f"price_{i:010d}",
                "object": "price",
                "active": True,
                "currency": "usd",
                "lookup_key": f"sticker_{i % 3}",
                "metadata": {"credits": str(10 * (i % 3 + 1))},
                "product": f"prod_{i:010d}",
                "type": "one_time",
                "unit_amount": 500,
            },
            "quantity": i % 3 + 1,
        }
        for i in range(count)
    ]


def invoice_lines(count: int, invoice_id: str) -> list[dict[str, Any]]:
    """``count`` lines of a subscription's invoice as Stripe's API lists them (``line_item``
    objects, each a seat with its service period and the subscription's metadata)."""
    tail = invoice_id[-8:]
    return [
        {
            "id": f"il_{tail}{i:06d}",
            "object": "line_item",
            "amount": 1000,
            "currency": "usd",
            "description": f"1 × Seat {i} (at $10.00 / month)",
            "livemode": False,
            "metadata": {"seat": str(i)},
            "period": {"start": 1_700_000_000, "end": 1_702_592_000},
            "price": {"id": f"price_seat{i:06d}", "object": "price", "product": "prod_seat"},
            "quantity": 1,
            "type": "subscription",
        }
        for i in range(count)
    ]
