"""Access to the people-facing routes: OPS_TOKEN as a bearer token or HTTP basic password,
compared in constant time, and a CSRF token for the few routes that change anything."""

import base64
import binascii
import hashlib
import hmac

from flask import Request


def presented_token(request: Request) -> str:
    """The token a request carries: ``Bearer <token>`` or basic auth's password."""
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


def csrf_token(ops_token: str) -> str:
    """Derived from the ops token: a page from another site cannot read it, so cannot send it."""
    return hmac.new(ops_token.encode(), b"ops-csrf-v1", hashlib.sha256).hexdigest()


def csrf_ok(ops_token: str, request: Request) -> bool:
    given = request.headers.get("X-CSRF-Token") or request.form.get("csrf_token", "")
    return token_ok(csrf_token(ops_token), given)
