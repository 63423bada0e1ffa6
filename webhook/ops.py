"""People-facing JSON: health probes and the ops API under /ops/api (OPS_TOKEN required).

Read-only, except retry/resolve, which need POST and the CSRF token.
"""

from importlib import resources

from flask import Blueprint, Response, request
from redis.exceptions import RedisError

from ledger import queries, reconcile, secret_usage
from webhook.http import csrf_ok, decide, int_arg, json_response, require_token
from webhook.store import current_settings, get_redis

health_bp = Blueprint("health", __name__)
api_bp = Blueprint("ops_api", __name__, url_prefix="/ops/api")


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


@api_bp.before_request
def require_ops_token() -> Response | None:
    return require_token(current_settings().OPS_TOKEN, "Bearer")


@api_bp.get("/summary")
def api_summary() -> Response:
    redis = get_redis()
    data = queries.summary(redis, current_settings().QUEUE_NAME)
    data["workers"] = queries.workers_state(redis, current_settings().QUEUE_NAME)
    return json_response(data)


@api_bp.get("/events")
def api_events() -> Response:
    rows = queries.events(
        get_redis(),
        request.args.get("type") or None,
        int_arg("since", 0, 10**14) or None,
        int_arg("until", 0, 10**14) or None,
        int_arg("offset", 0),
        int_arg("limit", 50, 500),
    )
    return json_response({"events": rows, "offset": int_arg("offset", 0)})


@api_bp.get("/events/<event_id>")
def api_event(event_id: str) -> Response:
    record = queries.event(get_redis(), event_id, with_payload=request.args.get("payload") == "1")
    return json_response(record) if record else json_response({"error": "not_found"}, 404)


@api_bp.get("/payments")
def api_payments() -> Response:
    state = request.args.get("state") or None
    if state and state not in queries.STATE_FILTERS:
        return json_response({"error": "unknown_state", "states": list(queries.STATE_FILTERS)}, 400)
    offset, limit = int_arg("offset", 0), int_arg("limit", 50, 500)
    stuck = current_settings().STUCK_QUEUED_SECONDS
    rows = queries.payments(get_redis(), state, offset, limit, stuck)
    return json_response({"payments": rows, "offset": int_arg("offset", 0)})


@api_bp.get("/payments/<payment_key>")
def api_payment(payment_key: str) -> Response:
    record = queries.payment(get_redis(), payment_key)
    return json_response(record) if record else json_response({"error": "not_found"}, 404)


@api_bp.get("/rejections")
def api_rejections() -> Response:
    return json_response(
        {"rejections": queries.rejections(get_redis(), int_arg("limit", 100, 1000))}
    )


@api_bp.get("/series")
def api_series() -> Response:
    return json_response({"series": queries.series(get_redis(), int_arg("minutes", 60, 2880))})


@api_bp.get("/secrets")
def api_secrets() -> Response:
    s = current_settings()
    rows = secret_usage.usage(get_redis(), s.secret_labels, s.SECRET_RETIRE_AFTER_DAYS)
    return json_response({"retire_after_days": s.SECRET_RETIRE_AFTER_DAYS, "secrets": rows})


@api_bp.get("/reconcile")
def api_reconcile() -> Response:
    runs = reconcile.runs(get_redis(), int_arg("limit", 10, 50))
    return json_response({"interval": current_settings().RECONCILE_INTERVAL, "runs": runs})


@api_bp.get("/openapi.yaml")
def api_openapi() -> Response:
    spec = resources.files("webhook").joinpath("openapi.yaml").read_bytes()
    return Response(spec, mimetype="application/yaml")


@api_bp.post("/payments/<payment_key>/<any(retry, resolve):action>")
def api_decide(payment_key: str, action: str) -> Response:
    if not csrf_ok(current_settings().OPS_TOKEN):
        return json_response({"error": "csrf_token_missing_or_wrong"}, 403)
    decision = "retry" if action == "retry" else request.values.get("as", "")
    body, status = decide(payment_key, action, decision, "ops-api")
    return json_response(body, status)
