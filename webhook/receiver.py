"""The Stripe endpoint's Flask side: the methods other than POST, and counting a rejection.
Also every request refused before any view, on any path: no route (404), a method the
route does not take (405), a Host routing cannot use (400), and a 401 for want of a token,
each a JSON answer counted as a rejection. POST itself, the hot path, is served ahead of
Flask by webhook/endpoint.py."""

import hashlib
import logging

import orjson
from flask import Blueprint, Response, request
from werkzeug.exceptions import HTTPException

from ledger.deliveries import Ledger
from ledger.read.base import Problem
from webhook.connections import client_address
from webhook.exceptions import Rejected
from webhook.http import json_response, view_response
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
OPS_API = "/ops/api/"


@bp.route(PATH, methods=ANY_METHOD, provide_automatic_options=False)
def stripe_webhook() -> Response:
    """Any method but POST (which webhook/endpoint.py answers before Flask routes it)."""
    return reject(Rejected("method_not_allowed", 405, f"use {ALLOWED_METHOD}"), b"")


@bp.app_errorhandler(404)
def unknown_path(error: HTTPException) -> Response | HTTPException:
    """A path no route takes (a scanner's, ``/webhooks/stripe/``, ``/webhooks//stripe``):
    JSON, counted as ``unknown_path``. A view's own 404 (a record the dashboard does not
    have) is left to the view."""
    if request.url_rule is not None:
        return error
    return reject(Rejected("unknown_path", 404, "no such path"), b"")


@bp.app_errorhandler(405)
def method_not_allowed(error: HTTPException) -> Response:
    """A method the path's routes do not take (on the Stripe endpoint, those routing refuses
    before the view: TRACE, PROPFIND, ...): same answer as the view's, counted."""
    allowed = [ALLOWED_METHOD] if request.path == PATH else sorted(valid_methods(error))
    response = reject(Rejected("method_not_allowed", 405, f"use {', '.join(allowed)}"), b"")
    response.headers["Allow"] = ", ".join(allowed)
    return response


@bp.app_errorhandler(400)
def bad_request(error: HTTPException) -> Response | HTTPException:
    """A request Werkzeug's routing refuses (a Host header it cannot use), or any 400 on the
    Stripe endpoint: the same JSON answer as any rejection, counted. A view's own 400 (a
    dashboard page's bad filter) is left to the view."""
    if request.path == PATH or request.routing_exception is error:
        detail = str(error.description or "")[:200]
        return reject(Rejected("malformed_request", 400, detail), b"")
    return error


@bp.after_app_request
def count_unauthorized(response: Response) -> Response:
    """A 401 (the ops API, dashboard, /metrics without their token) is a rejected request:
    counted as ``unauthorized``; its answer is JSON already (webhook/http.py)."""
    if response.status_code == 401:
        count(Rejected("unauthorized", 401), b"")
    return response


def valid_methods(error: HTTPException) -> list[str]:
    return list(getattr(error, "valid_methods", None) or [])


def reject(rejected: Rejected, body: bytes) -> Response:
    """Count the rejection (never the body itself) and answer with its reason; under the ops
    API as the API's Problem (webhook/openapi.yaml)."""
    count(rejected, body)
    if request.path.startswith(OPS_API):
        problem = Problem(error=rejected.reason, message=rejected.detail or rejected.reason)
        return view_response(problem, rejected.status)
    return json_response(rejection_payload(rejected), rejected.status)


def count(rejected: Rejected, body: bytes) -> None:
    """Count a rejection of the request being served."""
    size = len(body) if body else (request.content_length or 0)
    remote = client_address(
        request.remote_addr,
        request.headers.get("X-Forwarded-For"),
        current_settings().TRUSTED_PROXIES,
    )
    count_rejection(get_ledger(), rejected, size, body, remote, request.method)


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
