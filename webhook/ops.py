"""People-facing JSON: health probes and the ops API under /ops/api (OPS_TOKEN required).

Every answer is one of the typed objects of the read model (ledger/read/, RESPONSES), the
same objects that ``webhook-ledger ... --json`` prints; webhook/openapi.yaml documents them.
Read-only, except retry/resolve, pausing/resuming fulfilment and a Checkout Session's
fulfilment (webhook/landing.py), which need POST (and with basic auth the CSRF token).
"""

import os
from importlib import resources

from flask import Blueprint, Response, request
from redis.exceptions import RedisError

from ledger import reconcile
from ledger.decisions import BadFilter, decide
from ledger.purchase import Purchase
from ledger.read import events, fulfilment, payments, rejections, secrets, stats
from ledger.read.base import Problem
from ledger.read.decisions import BulkDecision, Decision
from ledger.read.events import Event, EventList
from ledger.read.fulfilment import Fulfilment
from ledger.read.payments import Payment, PaymentList
from ledger.read.reconcile import ReconcileList
from ledger.read.rejections import RejectionList
from ledger.read.secrets import SecretList
from ledger.read.sessions import SessionFulfilment
from ledger.read.stats import Series, Summary
from webhook.http import (
    BadArgument,
    change_pause,
    csrf_ok,
    decide_bulk_from_request,
    flag_arg,
    int_arg,
    json_response,
    operator,
    problem_response,
    require_ops,
    time_arg,
    view_response,
)
from webhook.store import current_attempts, current_settings, get_redis

RESPONSES: tuple[type, ...] = (
    Summary,
    EventList,
    Event,
    PaymentList,
    Payment,
    RejectionList,
    Series,
    SecretList,
    ReconcileList,
    Decision,
    BulkDecision,
    Fulfilment,
    Problem,
    Purchase,
    SessionFulfilment,
)
"""What the ops API answers, and the HTTP action's body (Purchase); webhook/openapi.yaml's
schemas are these and what they hold."""

health_bp = Blueprint("health", __name__)
api_bp = Blueprint("ops_api", __name__, url_prefix="/ops/api")
FAVICON = resources.files("webhook").joinpath("static/favicon.svg")


@health_bp.get("/healthz")
def healthz() -> Response:
    return json_response({"status": "ok"})


@health_bp.get("/readyz")
def readyz() -> Response:
    """Ready once Redis answers; ``pid`` names the process that answered, so a launcher can
    tell its own server from another one on the same port (ledgerctl/local_guard.py)."""
    try:
        get_redis().ping()
    except RedisError as exc:
        return json_response({"status": "unavailable", "error": type(exc).__name__}, 503)
    return json_response({"status": "ready", "pid": os.getpid()})


@health_bp.get("/favicon.ico")
def favicon() -> Response:
    """The dashboard's icon (browsers ask for it without credentials)."""
    response = Response(FAVICON.read_bytes(), mimetype="image/svg+xml")
    response.cache_control.max_age = 86400
    return response


@api_bp.before_request
def require_ops_token() -> Response | None:
    return require_ops("Bearer")


@api_bp.errorhandler(BadArgument)
def bad_argument(exc: BadArgument) -> Response:
    return problem_response(exc.problem)


@api_bp.get("/summary")
def api_summary() -> Response:
    return view_response(stats.summary(get_redis(), current_settings()))


@api_bp.get("/events")
def api_events() -> Response:
    offset, limit = int_arg("offset", 0), int_arg("limit", 50, 1, 500)
    rows = events.events(
        get_redis(),
        request.args.get("type") or None,
        time_arg("since"),
        time_arg("until"),
        offset,
        limit,
    )
    return view_response(EventList(events=rows, offset=offset, limit=limit))


@api_bp.get("/events/<event_id>")
def api_event(event_id: str) -> Response:
    record = events.event(get_redis(), event_id, flag_arg("payload"))
    if record is None:
        return problem_response(Problem(error="not_found", message=f"no event {event_id}"))
    return view_response(record)


@api_bp.get("/payments")
def api_payments() -> Response:
    state = request.args.get("state")
    if state is not None and state not in payments.STATE_FILTERS:
        message = f"state must be one of {', '.join(payments.STATE_FILTERS)}"
        allowed = list(payments.STATE_FILTERS)
        return problem_response(Problem(error="unknown_state", message=message, allowed=allowed))
    offset, limit = int_arg("offset", 0), int_arg("limit", 50, 1, 500)
    stuck = current_settings().STUCK_QUEUED_SECONDS
    rows = payments.payments(get_redis(), state, offset, limit, stuck)
    return view_response(PaymentList(payments=rows, state=state, offset=offset, limit=limit))


@api_bp.get("/payments/<payment_key>")
def api_payment(payment_key: str) -> Response:
    record = payments.payment(get_redis(), payment_key, current_settings().sqlite_downstream)
    if record is None:
        return problem_response(Problem(error="not_found", message=f"no payment {payment_key}"))
    return view_response(record)


@api_bp.get("/rejections")
def api_rejections() -> Response:
    limit = int_arg("limit", 100, 1, 1000)
    return view_response(
        RejectionList(rejections=rejections.rejections(get_redis(), limit), limit=limit)
    )


@api_bp.get("/series")
def api_series() -> Response:
    return view_response(stats.series(get_redis(), int_arg("minutes", 60, 1, 2880)))


@api_bp.get("/secrets")
def api_secrets() -> Response:
    s = current_settings()
    return view_response(secrets.usage(get_redis(), s.secret_labels, s.SECRET_RETIRE_AFTER_DAYS))


@api_bp.get("/reconcile")
def api_reconcile() -> Response:
    runs = reconcile.runs(get_redis(), int_arg("limit", 10, 1, 50))
    return view_response(ReconcileList(interval_s=current_settings().RECONCILE_INTERVAL, runs=runs))


@api_bp.get("/openapi.yaml")
def api_openapi() -> Response:
    spec = resources.files("webhook").joinpath("openapi.yaml").read_bytes()
    return Response(spec, mimetype="application/yaml")


def csrf_refused() -> Response:
    message = "send the CSRF token (X-CSRF-Token header or csrf_token form field)"
    return view_response(Problem(error="csrf_token_missing_or_wrong", message=message), 403)


@api_bp.get("/fulfilment")
def api_fulfilment() -> Response:
    return view_response(fulfilment.status(get_redis(), current_settings()))


@api_bp.post("/fulfilment/<any(pause, resume):action>")
def api_pause(action: str) -> Response:
    if not csrf_ok():
        return csrf_refused()
    return view_response(change_pause(action, operator("ops")))  # not_replicated: unavailable.py


@api_bp.post("/bulk/<any(retry, resolve):action>")
def api_bulk(action: str) -> Response:
    """Re-queue every payment a filter selects (``dry_run=1``: only list them)."""
    if not csrf_ok():
        return csrf_refused()
    try:
        return view_response(decide_bulk_from_request(action, flag_arg("dry_run"), operator("ops")))
    except BadFilter as exc:
        return problem_response(Problem(error="bad_argument", message=str(exc)))


@api_bp.post("/payments/<payment_key>/<any(retry, resolve):action>")
def api_decide(payment_key: str, action: str) -> Response:
    if not csrf_ok():
        return csrf_refused()
    decision = "retry" if action == "retry" else request.values.get("as", "")
    answer = decide(current_attempts(), payment_key, action, decision, operator("ops"))
    if isinstance(answer, Problem):
        return problem_response(answer)
    return view_response(answer)
