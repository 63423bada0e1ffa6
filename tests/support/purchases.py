"""A Checkout purchase as Stripe sends it, with what a merchant's fulfilment needs: the
session's ``client_reference_id``, metadata on the session and on the PaymentIntent (not the
same), the buyer's email and name; and the Purchase schema of webhook/openapi.yaml."""

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
