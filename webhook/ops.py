"""The people-facing blueprint: health probes and the ops JSON API (bearer OPS_TOKEN)."""

import hmac

from flask import Blueprint, Response, current_app, request
from redis.exceptions import RedisError

from webhook import readout
from webhook.receiver import json_response
from webhook.settings import Settings
from webhook.store import get_redis

health_bp = Blueprint("health", __name__)
ops_bp = Blueprint("ops", __name__, url_prefix="/ops")


@health_bp.get("/healthz")
def healthz() -> Response:
    return json_response({"status": "ok"})


@health_bp.get("/readyz")
def readyz() -> Response:
    try:
        get_redis().ping()
    except RedisError as exc:
        return json_response({"status": "unavailable", "error": type(exc).__name__}, 503)
    return json_response({"status": "ready"})


def token_ok(expected: str, header: str) -> bool:
    """Constant-time check of ``Authorization: Bearer <token>``."""
    scheme, _, given = header.partition(" ")
    return (
        bool(expected)
        and scheme.lower() == "bearer"
        and hmac.compare_digest(given.strip().encode(), expected.encode())
    )


@ops_bp.before_request
def require_token() -> Response | None:
    settings: Settings = current_app.config["SETTINGS"]
    if not token_ok(settings.OPS_TOKEN, request.headers.get("Authorization", "")):
        response = json_response({"error": "unauthorized"}, 401)
        response.headers["WWW-Authenticate"] = 'Bearer realm="ops"'
        return response
    return None


@ops_bp.get("/api/summary")
def api_summary() -> Response:
    settings: Settings = current_app.config["SETTINGS"]
    return json_response(readout.summary(get_redis(), settings.QUEUE_NAME))
