"""The Stripe-facing blueprint: verify, record, answer. No fulfilment happens here."""

import hashlib
import logging
import time

import orjson
from flask import Blueprint, Response, request
from werkzeug.exceptions import HTTPException

from ledger.deliveries import Delivery, LedgerUnavailable, new_request_id
from ledger.events import classify
from ledger.faults import fault
from ledger.limits import REPLAY_HEADER
from webhook.connections import client_address
from webhook.exceptions import Rejected
from webhook.http import json_response
from webhook.intake import delivery_source, parse_event, read_body
from webhook.metrics_alerting import count_unavailable
from webhook.store import current_settings, get_ledger

bp = Blueprint("receiver", __name__)
log = logging.getLogger("webhook.delivery")
LARGEST_SIZE = 10**14 - 1
"""A declared size is recorded up to this, the largest the ledger's Lua JSON (cjson, 14
significant digits) keeps exact; a Content-Length beyond it, 2**64 or any number of
digits, is recorded as this."""
ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@bp.route("/webhooks/stripe", methods=ANY_METHOD, provide_automatic_options=False)
def stripe_webhook() -> Response:
    started = time.perf_counter()
    settings = current_settings()
    body = b""
    try:
        body = read_body(request, settings.MAX_BODY_BYTES)
        event, secret_index = parse_event(body, request.headers.get("Stripe-Signature"), settings)
    except Rejected as rejected:
        return reject(rejected, body)
    fault("receiver_after_verify")
    secret_label = settings.secret_labels[secret_index]
    delivery = Delivery(
        event=event,
        body=body,
        classified=classify(event, settings.policy),
        secret_label=secret_label,
        source=delivery_source(
            request.headers.get("User-Agent", ""), request.headers.get(REPLAY_HEADER), secret_label
        ),
        request_id=new_request_id(),
    )
    try:
        recorded = get_ledger().record_delivery(delivery)
    except LedgerUnavailable as exc:
        count_unavailable(exc.__cause__)
        log.error(
            orjson.dumps({"event_id": event["id"], "status": 503, "error": str(exc)}).decode()
        )
        return json_response({"error": "ledger_unavailable", "retry": True}, 503)
    fault("receiver_after_record")
    log.info(
        orjson.dumps(
            {
                "event_id": event["id"],
                "type": event["type"],
                "payment": delivery.classified.payment_key,
                "deliveries": recorded.deliveries,
                "status": 200,
                "ms": round((time.perf_counter() - started) * 1000, 2),
            }
        ).decode()
    )
    return json_response(
        {
            "event_id": event["id"],
            "deliveries": recorded.deliveries,
            "duplicate": recorded.duplicate,
        }
    )


@bp.app_errorhandler(405)
def method_not_allowed(error: Exception) -> Response:
    """Methods routing refuses before the view (TRACE, PROPFIND, ...): same answer, counted."""
    if request.path == "/webhooks/stripe":
        return reject(Rejected("method_not_allowed", 405, "use POST"), b"")
    return json_response({"error": "method_not_allowed"}, 405)


@bp.app_errorhandler(400)
def bad_request(error: HTTPException) -> Response | HTTPException:
    """A request Werkzeug refuses before the view (a Host header it cannot use): on the
    Stripe endpoint the same JSON answer as any rejection, counted; elsewhere unchanged."""
    if request.path == "/webhooks/stripe":
        detail = str(error.description or "")[:200]
        return reject(Rejected("malformed_request", 400, detail), b"")
    return error


def reject(rejected: Rejected, body: bytes) -> Response:
    """Count the rejection (never the body itself) and answer with its reason."""
    size = len(body) if body else (request.content_length or 0)
    remote = client_address(
        request.remote_addr,
        request.headers.get("X-Forwarded-For"),
        current_settings().TRUSTED_PROXIES,
    )
    count_rejection(rejected, size, body, remote, request.method)
    return json_response(rejection_payload(rejected), rejected.status)


def count_rejection(
    rejected: Rejected, size: int, body: bytes, remote: str | None, method: str | None
) -> None:
    """Count it by reason and keep a body-free record; log one JSON line."""
    record = {
        "reason": rejected.reason,
        "status": rejected.status,
        "size": min(size, LARGEST_SIZE),
        "sha256": hashlib.sha256(body).hexdigest() if body else None,
        "remote": remote,
        "method": method,
    }
    counted = get_ledger().record_rejection(rejected.reason, record)
    log.info(orjson.dumps({**record, "counted": counted}).decode())


def rejection_payload(rejected: Rejected) -> dict[str, object]:
    """The JSON answer to a rejected request: its reason, and a detail if there is one."""
    payload: dict[str, object] = {"error": rejected.reason}
    if rejected.detail:
        payload["detail"] = rejected.detail
    return payload
