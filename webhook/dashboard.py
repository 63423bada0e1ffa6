"""The ops dashboard: server-rendered HTML under /ops/, refreshing itself; no build step.

It shows the typed objects of ledger/read/, the objects the ops API answers. Times are
written in ISO-8601 UTC and shown in the browser's zone (a few lines of script; without
script they stay UTC). Browsers sign in with HTTP basic auth (any user name, an OPS_TOKEN
token as password; that token's label is who acts, recorded as ``dashboard:LABEL``). Pages
only read; the retry/resolve buttons and the pause/resume page POST with the CSRF token.
"""

import math
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, Response, abort, redirect, render_template, request, url_for
from markupsafe import Markup
from werkzeug.wrappers import Response as WerkzeugResponse

from ledger import reconcile
from ledger.decisions import STATES, BadFilter, decide
from ledger.purchase_shipping import address_text
from ledger.read import events as read_events
from ledger.read import fulfilment, rejections, secrets, stats
from ledger.read import payments as read_payments
from ledger.read.base import Problem, to_json
from ledger.read.next_step import elsewhere, next_step
from ledger.read.payment_reasons import not_paid, reason, spent
from ledger.read.stats import Minute
from ledger.read.timeline import LEG_NAMES, ended_by_the_ledger, outcome_words
from ledger.replication import NotReplicated
from ledger.settings import effect_lines
from webhook.http import (
    PROBLEM_STATUS,
    BadArgument,
    change_pause,
    csrf_ok,
    decide_bulk_from_request,
    int_arg,
    operator,
    request_csrf,
    require_ops,
    time_arg,
)
from webhook.store import current_attempts, current_settings, get_redis

bp = Blueprint("dashboard", __name__, url_prefix="/ops")
PAGE = 25
CHART_HEIGHT = 100


@bp.before_request
def require_ops_token() -> Response | None:
    return require_ops("Basic")


@bp.after_request
def no_framing(response: WerkzeugResponse) -> WerkzeugResponse:
    """The pages carry the CSRF token and act with cached credentials: never in a frame."""
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.errorhandler(BadArgument)
def bad_argument(exc: BadArgument) -> tuple[str, int]:
    return render_template("ops/problem.html", problem=exc.problem), 400


@bp.app_template_filter("when")
def when(moment: datetime | None) -> Markup:
    """A time as ISO-8601 UTC in a <time> element (the page's script shows it local)."""
    if moment is None:
        return Markup('<span class="muted">-</span>')
    iso = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    return Markup('<time datetime="{0}">{1}</time>').format(iso, iso.replace("T", " "))


@bp.app_template_filter("epoch")
def epoch(seconds: int) -> Markup:
    """Stripe's unix seconds (an invoice line's period), as :func:`when` shows a time."""
    return when(datetime.fromtimestamp(seconds, UTC))


@bp.app_template_filter("number")
def number(value: int | float | None) -> str:
    """Thousands separated; '-' for nothing."""
    return "-" if value is None else f"{value:,}"


@bp.app_template_filter("reject_offset")
def reject_offset(args: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in args.items() if k != "offset"}


@bp.app_template_filter("why")
def why(row: read_payments.PaymentRow) -> str:
    return reason(row) or ""


bp.add_app_template_filter(address_text, "address")


@bp.app_template_filter("pretty_json")
def pretty_json(value: object) -> str:
    return to_json(value, indent=True).decode()


@bp.context_processor
def common() -> dict[str, object]:
    return {
        "csrf": request_csrf(),
        "states": read_payments.PAYMENT_STATES,
        "leg_names": LEG_NAMES,
        "outcome_words": outcome_words,
        "ended_by_the_ledger": ended_by_the_ledger,
        "spent": spent,
        "not_paid": not_paid,
    }


def chart(points: list[Minute]) -> dict[str, Any]:
    """Bars on a log scale (a burst of thousands leaves a minute of ten readable): each
    bar's height, and gridlines at the powers of ten up to the peak."""
    peak = max((max(p.deliveries, p.rejected) for p in points), default=0)
    top = math.log10(peak + 1) or 1.0

    def height(n: int) -> float:
        return round(math.log10(n + 1) / top * CHART_HEIGHT, 1)

    bars = [
        {"x": i * 10, "deliveries": height(p.deliveries), "rejected": height(p.rejected), "p": p}
        for i, p in enumerate(points)
    ]
    ticks = [
        {"y": CHART_HEIGHT + 10 - height(10**k), "label": f"{10**k:,}"}
        for k in range(0, int(math.log10(peak)) + 1 if peak else 0)
    ]
    return {"bars": bars, "ticks": ticks, "peak": peak, "base": CHART_HEIGHT + 10}


@bp.get("/")
def index() -> str:
    s = current_settings()
    redis = get_redis()
    series = stats.series(redis, 60)
    return render_template(
        "ops/index.html",
        summary=stats.summary(redis, s),
        series=series,
        chart=chart(series.series),
        events=read_events.events(redis, limit=15),
        attention=read_payments.payments(
            redis, read_payments.ATTENTION, 0, 10, s.STUCK_QUEUED_SECONDS
        ),
        rejections=rejections.rejections(redis, 10),
        secrets=secrets.usage(redis, s.secret_labels, s.SECRET_RETIRE_AFTER_DAYS),
        reconciled=reconcile.runs(redis, 1),
        reconcile_interval=s.RECONCILE_INTERVAL,
    )


@bp.get("/events")
def events() -> str:
    offset = int_arg("offset", 0)
    event_type = request.args.get("type") or None
    rows = read_events.events(
        get_redis(),
        event_type,
        time_arg("since", strict=False),
        time_arg("until", strict=False),
        offset,
        PAGE,
    )
    return render_template(
        "ops/events.html", rows=rows, offset=offset, page=PAGE, args=request.args
    )


@bp.get("/events/<event_id>")
def event(event_id: str) -> str:
    record = read_events.event(get_redis(), event_id, with_payload=True)
    if record is None:
        abort(404)
    return render_template("ops/event.html", e=record)


@bp.get("/payments")
def payments() -> str:
    state = request.args.get("state") or None
    if state and state not in read_payments.STATE_FILTERS:
        abort(400)
    offset = int_arg("offset", 0)
    rows = read_payments.payments(
        get_redis(), state, offset, PAGE, current_settings().STUCK_QUEUED_SECONDS
    )
    return render_template("ops/payments.html", rows=rows, state=state, offset=offset, page=PAGE)


@bp.get("/payments/<payment_key>")
def payment(payment_key: str) -> str:
    return _payment_page(payment_key)


@bp.post("/payments/<payment_key>/<any(retry, resolve):action>")
def act(payment_key: str, action: str) -> WerkzeugResponse | tuple[str, int]:
    """Done: back to the payment (303). Refused: the payment page with the reason (409/400)."""
    if not csrf_ok():
        abort(403)
    decision = "retry" if action == "retry" else request.form.get("as", "")
    answer = decide(current_attempts(), payment_key, action, decision, operator("dashboard"))
    if isinstance(answer, Problem):
        return _payment_page(payment_key, refusal=answer), PROBLEM_STATUS.get(answer.error, 400)
    return redirect(url_for("dashboard.payment", payment_key=payment_key), code=303)


@bp.get("/fulfilment")
def gate_page() -> str:
    """Pause or resume: this page is the confirmation step (the overview links here)."""
    return render_template(
        "ops/fulfilment.html", f=fulfilment.status(get_redis(), current_settings())
    )


@bp.post("/fulfilment/<any(pause, resume):action>")
def pause_or_resume(action: str) -> WerkzeugResponse:
    if not csrf_ok():
        abort(403)
    try:
        change_pause(action, operator("dashboard"))
    except NotReplicated as exc:
        f = fulfilment.status(get_redis(), current_settings())
        return Response(render_template("ops/fulfilment.html", f=f, unconfirmed=exc), 503)
    return redirect(url_for("dashboard.gate_page"), code=303)


@bp.get("/bulk")
def bulk_page() -> str | tuple[str, int]:
    """The filtered list (a dry run) and its one confirmed action."""
    return _bulk(request.args.get("action", "retry"), dry_run=True)


@bp.post("/bulk/<any(retry, resolve):action>")
def bulk_act(action: str) -> str | tuple[str, int]:
    if not csrf_ok():
        abort(403)
    return _bulk(action, dry_run=False)


def _bulk(action: str, dry_run: bool) -> str | tuple[str, int]:
    if action not in STATES:
        abort(400)
    try:
        result = decide_bulk_from_request(action, dry_run, operator("dashboard"))
    except BadFilter as exc:
        problem = Problem(error="bad_argument", message=str(exc))
        return render_template("ops/problem.html", problem=problem), 400
    states = STATES[action]
    return render_template("ops/bulk.html", action=action, result=result, bulk_states=states)


def _payment_page(payment_key: str, refusal: Problem | None = None) -> str:
    """The payment page; ``refusal`` is the ops API's answer to a refused decision."""
    s = current_settings()
    record = read_payments.payment(get_redis(), payment_key, s.sqlite_downstream)
    if record is None:
        abort(404)
    return render_template(
        "ops/payment.html",
        p=record,
        refusal=refusal,
        downstream_kept=s.sqlite_downstream is not None,
        effects=effect_lines(s),
        step=next_step(record, s.REVERSAL_ACTION is not None),
        elsewhere=elsewhere(record),
    )
