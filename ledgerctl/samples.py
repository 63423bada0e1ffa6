"""Realistic Stripe events for tests, the replay script and benchmarks, and their signing.

Events are built from real test-mode payloads shipped in ``sample_events/`` with fresh
ids, so each generated payment is distinct and each event is about 2-6 KB as sent.
"""

import json
import random
import re
import time
from functools import cache
from importlib import resources
from typing import Any

from stripe import WebhookSignature

CARD_PAYMENT = ("payment_intent.created", "charge.succeeded", "payment_intent.succeeded")
PAID_TYPES = ("charge.succeeded", "payment_intent.succeeded", "checkout.session.completed")
_ZEROED = re.compile(r"^([a-z]+(?:_test)?)_0{10,}$")
_AMOUNT_FIELDS = ("amount", "amount_received", "amount_captured", "amount_total", "amount_paid")
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@cache
def template(event_type: str) -> str:
    return resources.files("ledgerctl").joinpath("sample_events", f"{event_type}.json").read_text()


def random_id(rng: random.Random, prefix: str, length: int = 24) -> str:
    return prefix + "_" + "".join(rng.choice(_ALPHABET) for _ in range(length))


def _refresh(value: Any, ids: dict[str, str], rng: random.Random, amount: int) -> Any:
    if isinstance(value, dict):
        return {
            k: amount
            if k in _AMOUNT_FIELDS and isinstance(v, int) and v
            else _refresh(v, ids, rng, amount)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_refresh(v, ids, rng, amount) for v in value]
    if isinstance(value, str) and (m := _ZEROED.match(value)):
        if value not in ids:
            ids[value] = random_id(rng, m.group(1), len(value) - len(m.group(1)) - 1)
        return ids[value]
    return value


def payment_events(
    rng: random.Random, checkout: bool = False, created: int | None = None
) -> list[dict[str, Any]]:
    """The events Stripe sends for one card payment, in Stripe's order, sharing one pi_ id."""
    types = CARD_PAYMENT + (("checkout.session.completed",) if checkout else ())
    ids: dict[str, str] = {}
    amount = rng.choice((500, 1000, 2000, 4999, 12000))
    stamp = created or int(time.time())
    events = []
    for offset, event_type in enumerate(types):
        event = _refresh(json.loads(template(event_type)), ids, rng, amount)
        event["id"] = random_id(rng, "evt")
        event["created"] = stamp + offset
        events.append(event)
    return events


def event_of_type(rng: random.Random, event_type: str) -> dict[str, Any]:
    """One event of a shipped type with fresh ids."""
    event = _refresh(json.loads(template(event_type)), {}, rng, 2000)
    event["id"] = random_id(rng, "evt")
    return event


def encode(event: dict[str, Any]) -> bytes:
    """Bytes as Stripe sends them (pretty-printed JSON, two-space indent)."""
    return json.dumps(event, indent=2).encode()


def sign(body: bytes, secret: str, timestamp: int | None = None, v0: bool = False) -> str:
    """A ``Stripe-Signature`` header for ``body``; ``v0`` adds the entry the CLI sends."""
    header = WebhookSignature.generate_signature_header(body.decode(), secret, timestamp)
    if v0:
        header += ",v0=" + "0" * 64
    return header
