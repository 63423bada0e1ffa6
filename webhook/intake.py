"""The checks a delivery passes before the ledger sees it, in the order they run.

Each check raises :class:`Rejected` with a counted reason; nothing here touches Redis.
"""

from typing import Any

import orjson
from flask import Request

from ledger.events import NotAStripeEvent, check_shape
from ledger.settings import Settings
from webhook.exceptions import Rejected
from webhook.verify import verify

ALLOWED_METHOD = "POST"


def read_body(request: Request, max_bytes: int) -> bytes:
    """The raw body, refusing the method, content type or a size over ``max_bytes``."""
    if request.method != ALLOWED_METHOD:
        raise Rejected("method_not_allowed", 405, f"use {ALLOWED_METHOD}")
    if request.mimetype != "application/json":
        raise Rejected("unsupported_media_type", 415, "Content-Type must be application/json")
    if request.headers.get("Content-Encoding", "identity").lower() != "identity":
        raise Rejected("unsupported_media_type", 415, "Content-Encoding is not supported")
    if request.content_length is not None and request.content_length > max_bytes:
        raise Rejected("body_too_large", 413, f"limit is {max_bytes} bytes")
    body = request.stream.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise Rejected("body_too_large", 413, f"limit is {max_bytes} bytes")
    return body


def parse_event(body: bytes, header: str | None, settings: Settings) -> tuple[dict[str, Any], int]:
    """The verified event and the index of the secret that verified it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejected("invalid_encoding", detail="body is not UTF-8") from exc
    secret_index = verify(
        text, header, settings.STRIPE_WEBHOOK_SECRET, settings.STRIPE_WEBHOOK_TOLERANCE
    )
    try:
        event = check_shape(orjson.loads(body))
    except orjson.JSONDecodeError as exc:
        raise Rejected("invalid_json", detail=str(exc)[:200]) from exc
    except NotAStripeEvent as exc:
        raise Rejected("not_a_stripe_event", detail=str(exc)) from exc
    return event, secret_index


def delivery_source(user_agent: str, replay: str | None, secret_label: str) -> str:
    """Who sent it: the replay script (its header), the Stripe CLI, Stripe, or other.

    ``stripe listen`` forwards with Stripe's own User-Agent, so the CLI is told apart
    by the secret that verified it: label that secret ``cli`` in
    ``STRIPE_WEBHOOK_SECRET_LABELS``.
    """
    if replay:
        return "replay"
    if user_agent.startswith("Stripe/"):
        return "stripe-cli" if secret_label == "cli" else "stripe"
    return "other"
