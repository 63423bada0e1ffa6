"""The ops dashboard: server-rendered HTML under /ops/, refreshing itself; no build step.

Browsers sign in with HTTP basic auth (any user name, OPS_TOKEN as password). Pages only
read; the retry/resolve buttons POST with the CSRF token.
"""

from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, Response, abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response as WerkzeugResponse

from ledger import queries, reconcile, secret_usage
from ledger.downstream import read_downstream
from webhook.http import csrf_ok, csrf_token, decide, int_arg, require_token
from webhook.store import current_settings, get_redis

bp = Blueprint("dashboard", __name__, url_prefix="/ops")
PAGE = 25


@bp.before_request
def require_ops_token() -> Response | None:
    return require_token(current_settings().OPS_TOKEN, "Basic")


@bp.after_request
def no_framing(response: WerkzeugResponse) -> WerkzeugResponse:
    """The pages carry the CSRF token and act with cached credentials: never in a frame."""
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.app_template_filter("when")
def when(ms: object) -> str:
    """Epoch milliseconds as UTC time of day (date too when not today)."""
    try:
        moment = datetime.fromtimestamp(int(str(ms)) / 1000, UTC)
    except ValueError:
        return ""
    today = datetime.now(UTC).date() == moment.date()
    return moment.strftime("%H:%M:%S" if today else "%Y-%m-%d %H:%M:%S")


@bp.app_template_filter("secret_label")
def secret_label(label: object) -> str:
    return secret_usage.display(str(label)) if label else ""


@bp.app_template_filter("reject_offset")
def reject_offset(args: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in args.items() if k != "offset"}


@bp.context_processor
def common() -> dict[str, object]:
    return {"csrf": csrf_token(current_settings().OPS_TOKEN), "states": queries.PAYMENT_STATES}


@bp.get("/")
def index() -> str:
    s = current_settings()
    redis, queue = get_redis(), s.QUEUE_NAME
    return render_template(
        "ops/index.html",
        summary=queries.summary(redis, queue),
        workers=queries.workers_state(redis, queue),
        series=queries.series(redis, 60),
        events=queries.events(redis, limit=15),
        attention=queries.payments(
            redis, queries.ATTENTION, 0, 10, current_settings().STUCK_QUEUED_SECONDS
        ),
        rejections=queries.rejections(redis, 10),
        secrets=secret_usage.usage(redis, s.secret_labels, s.SECRET_RETIRE_AFTER_DAYS),
        retire_after_days=s.SECRET_RETIRE_AFTER_DAYS,
        reconciled=reconcile.runs(redis, 1),
        reconcile_interval=s.RECONCILE_INTERVAL,
    )


@bp.get("/events")
def events() -> str:
    offset = int_arg("offset", 0)
    rows = queries.events(
        get_redis(), request.args.get("type") or None, _ms("since"), _ms("until"), offset, PAGE
    )
    return render_template(
        "ops/events.html", rows=rows, offset=offset, page=PAGE, args=request.args
    )


@bp.get("/events/<event_id>")
def event(event_id: str) -> str:
    record = queries.event(get_redis(), event_id, with_payload=True)
    if record is None:
        abort(404)
    sources = {k[4:]: v for k, v in record.items() if k.startswith("src:")}
    return render_template("ops/event.html", e=record, sources=sources)


@bp.get("/payments")
def payments() -> str:
    state = request.args.get("state") or None
    if state and state not in queries.STATE_FILTERS:
        abort(400)
    offset = int_arg("offset", 0)
    rows = queries.payments(
        get_redis(), state, offset, PAGE, current_settings().STUCK_QUEUED_SECONDS
    )
    return render_template("ops/payments.html", rows=rows, state=state, offset=offset, page=PAGE)


@bp.get("/payments/<payment_key>")
def payment(payment_key: str) -> str:
    return _payment_page(payment_key)


@bp.post("/payments/<payment_key>/<any(retry, resolve):action>")
def act(payment_key: str, action: str) -> WerkzeugResponse | tuple[str, int]:
    """Done: back to the payment (303). Refused: the payment page with the reason (409/400)."""
    if not csrf_ok(current_settings().OPS_TOKEN):
        abort(403)
    decision = "retry" if action == "retry" else request.form.get("as", "")
    answer, status = decide(payment_key, action, decision, "dashboard")
    if status != 200:
        return _payment_page(payment_key, refusal=answer), status
    return redirect(url_for("dashboard.payment", payment_key=payment_key), code=303)


def _payment_page(payment_key: str, refusal: dict[str, Any] | None = None) -> str:
    """The payment page; ``refusal`` is the ops API's answer to a refused decision."""
    record = queries.payment(get_redis(), payment_key)
    if record is None:
        abort(404)
    return render_template(
        "ops/payment.html", p=record, downstream=_downstream(payment_key), refusal=refusal
    )


def _ms(name: str) -> int | None:
    value = request.args.get(name, "")
    if not value:
        return None
    try:
        return int(datetime.fromisoformat(value).replace(tzinfo=UTC).timestamp() * 1000)
    except ValueError:
        return None


def _downstream(payment_key: str) -> dict[str, int] | None:
    """The built-in SQLite downstream's own record of this payment, if it is the action."""
    path = current_settings().sqlite_downstream
    return read_downstream(path)["payments"].get(payment_key) if path else None
