"""The checks a delivery passes before the ledger sees it, in the order they run.

Each check raises :class:`Rejected` with a counted reason; nothing here touches Redis.
"""

from typing import Any

import orjson
from werkzeug.http import parse_options_header
from werkzeug.wsgi import get_content_length, get_input_stream

from ledger.event_shape import NotAStripeEvent, check_shape
from ledger.settings import Settings
from webhook.exceptions import Rejected
from webhook.verify import verify

ALLOWED_METHOD = "POST"


def read_body(environ: dict[str, Any], max_bytes: int) -> bytes:
    """The raw body of a POST's WSGI ``environ``, refusing the content type or a size over
    ``max_bytes``; read as Werkzeug's ``Request`` reads them (``mimetype``,
    ``content_length``, ``stream``)."""
    mimetype = parse_options_header(environ.get("CONTENT_TYPE", ""))[0].lower()
    if mimetype != "application/json":
        raise Rejected("unsupported_media_type", 415, "Content-Type must be application/json")
    if environ.get("HTTP_CONTENT_ENCODING", "identity").lower() != "identity":
        raise Rejected("unsupported_media_type", 415, "Content-Encoding is not supported")
    declared = get_content_length(environ)
    if declared is not None and declared > max_bytes:
        raise Rejected("body_too_large", 413, f"limit is {max_bytes} bytes")
    body = get_input_stream(environ).read(max_bytes + 1)
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
