"""The Stripe endpoint's Flask side: the methods other than POST, requests Werkzeug refuses
before any view, and counting a rejection. POST itself, the hot path, is served ahead of
Flask by webhook/endpoint.py."""

import hashlib
import logging

import orjson
from flask import Blueprint, Response, request
from werkzeug.exceptions import HTTPException

from ledger.deliveries import Ledger
from webhook.connections import client_address
from webhook.exceptions import Rejected
from webhook.http import json_response
from webhook.intake import ALLOWED_METHOD
from webhook.store import current_settings, get_ledger

bp = Blueprint("receiver", __name__)
log = logging.getLogger("webhook.delivery")
PATH = "/webhooks/stripe"
LARGEST_SIZE = 10**14 - 1
"""A declared size is recorded up to this, the largest the ledger's Lua JSON (cjson, 14
significant digits) keeps exact; a Content-Length beyond it, 2**64 or any number of
digits, is recorded as this."""
ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@bp.route(PATH, methods=ANY_METHOD, provide_automatic_options=False)
def stripe_webhook() -> Response:
    """Any method but POST (which webhook/endpoint.py answers before Flask routes it)."""
    return reject(Rejected("method_not_allowed", 405, f"use {ALLOWED_METHOD}"), b"")


@bp.app_errorhandler(405)
def method_not_allowed(error: Exception) -> Response:
    """Methods routing refuses before the view (TRACE, PROPFIND, ...): same answer, counted."""
    if request.path == PATH:
        return reject(Rejected("method_not_allowed", 405, f"use {ALLOWED_METHOD}"), b"")
    return json_response({"error": "method_not_allowed"}, 405)


@bp.app_errorhandler(400)
def bad_request(error: HTTPException) -> Response | HTTPException:
    """A request Werkzeug refuses before the view (a Host header it cannot use): on the
    Stripe endpoint the same JSON answer as any rejection, counted; elsewhere unchanged."""
    if request.path == PATH:
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
    count_rejection(get_ledger(), rejected, size, body, remote, request.method)
    return json_response(rejection_payload(rejected), rejected.status)


def count_rejection(
    ledger: Ledger,
    rejected: Rejected,
    size: int,
    body: bytes,
    remote: str | None,
    method: str | None,
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
    counted = ledger.record_rejection(rejected.reason, record)
    log.info(orjson.dumps({**record, "counted": counted}).decode())


def rejection_payload(rejected: Rejected) -> dict[str, object]:
    """The JSON answer to a rejected request: its reason, and a detail if there is one."""
    payload: dict[str, object] = {"error": rejected.reason}
    if rejected.detail:
        payload["detail"] = rejected.detail
    return payload
