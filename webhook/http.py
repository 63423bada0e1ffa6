"""What the blueprints share: JSON answers, OPS_TOKEN as a bearer token or HTTP basic
password (compared in constant time), the CSRF token of the few routes that change
anything, paging arguments, and a person's decision on a payment."""

import base64
import binascii
import hashlib
import hmac
from typing import Any

import orjson
from flask import Response, request

from ledger.attempts import DECISIONS, Attempts
from webhook.store import current_settings, get_redis

MAX_OFFSET = 10_000


def json_response(payload: dict[str, object], status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype="application/json")


def presented_token() -> str:
    """The token the request carries: ``Bearer <token>`` or basic auth's password."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return ""
        return decoded.partition(":")[2]
    return ""


def token_ok(expected: str, given: str) -> bool:
    """Constant-time comparison; an unset expected token never matches."""
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def unauthorized(challenge: str) -> Response:
    response = json_response({"error": "unauthorized"}, 401)
    response.headers["WWW-Authenticate"] = f'{challenge} realm="ops"'
    return response


def require_token(expected: str, challenge: str) -> Response | None:
    """A 401 answer unless the request carries ``expected``; None when it does."""
    return None if token_ok(expected, presented_token()) else unauthorized(challenge)


def csrf_token(ops_token: str) -> str:
    """Derived from the ops token: a page from another site cannot read it, so cannot send it."""
    return hmac.new(ops_token.encode(), b"ops-csrf-v1", hashlib.sha256).hexdigest()


def csrf_ok(ops_token: str) -> bool:
    """Whether the request carries the CSRF token (header or form field)."""
    given = request.headers.get("X-CSRF-Token") or request.form.get("csrf_token", "")
    return token_ok(csrf_token(ops_token), given)


def int_arg(name: str, default: int, high: int = MAX_OFFSET) -> int:
    """A whole-number query argument, clamped to 0..high."""
    try:
        return max(0, min(high, int(request.args.get(name, default))))
    except ValueError:
        return default


def decide(payment_key: str, action: str, decision: str, who: str) -> tuple[dict[str, Any], int]:
    """Apply a person's decision; refused (409) unless the payment is in an allowed state."""
    decisions, allowed = DECISIONS[action]
    if decision not in decisions:
        return {"error": "unknown_decision", "decisions": list(decisions)}, 400
    attempts = Attempts(get_redis(), current_settings())
    verdict, state = attempts.decide(payment_key, decision, allowed, who)
    if verdict == "wait":
        return {"error": "attempt_may_still_be_running", "retry_after_ms": int(state)}, 409
    if verdict != "ok":
        return {"error": "refused", "state": state, "allowed_from": list(allowed)}, 409
    return {"payment": payment_key, "state": state}, 200
