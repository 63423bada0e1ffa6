"""Redis down (or refusing writes) while the web process runs: every page and API that uses
the ledger answers 503 with what is wrong, never a traceback or a generic 500; so does an
ops write that fewer than LEDGER_MIN_REPLICAS replicas confirmed (``not_replicated``). The Stripe
endpoint answers its own 503 (``ledger_unavailable``, so Stripe retries) in endpoint.py;
rejections are still answered, their count lost (ledger/deliveries.py)."""

import logging
from datetime import UTC, datetime, timedelta

import orjson
from flask import Flask, Response, render_template, request
from redis.exceptions import (
    ConnectionError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TimeoutError,
)

from ledger.connection import describe
from ledger.deliveries import LedgerUnavailable
from ledger.downstream import DownstreamUnusable
from ledger.read.base import Problem
from ledger.redact import redact
from ledger.replication import REFUSED_WRITES, NotReplicated
from webhook.http import view_response
from webhook.store import current_settings

log = logging.getLogger("webhook.ops")
UNAVAILABLE = (
    ConnectionError,
    TimeoutError,
    ReadOnlyError,
    OutOfMemoryError,
    LedgerUnavailable,
    NotReplicated,
)
"""What means the ledger cannot be read or written now, with MISCONF and NOREPLICAS
(:func:`refused_write`); another Redis error is a bug: 500."""
RETRY_AFTER_S = 5


def answer(exc: Exception) -> Response:
    """503: JSON for the API, /metrics and anything else, a page for the dashboard."""
    where = describe(current_settings())
    error = redact(str(exc)) or type(exc).__name__
    if isinstance(exc, NotReplicated):  # the write stands on the primary: sent again, it counts
        code, title = "not_replicated", "not confirmed by the replicas"
        message = f"the ledger's Redis at {where} did not have enough replicas confirm: {error}"
    else:
        code, title = "ledger_unavailable", "the ledger is unavailable"
        message = f"the ledger's Redis at {where} cannot be used now: {error}"
    log.warning(orjson.dumps({"path": request.path, "status": 503, "error": message}).decode())
    if on_dashboard():
        page = render_template(
            "ops/unavailable.html",
            title=title,
            message=message,
            retry=RETRY_AFTER_S,
            unconfirmed=isinstance(exc, NotReplicated),
        )
        response = Response(page, status=503, mimetype="text/html")
    else:
        retry_after = datetime.now(UTC) + timedelta(seconds=RETRY_AFTER_S)  # Redis has no clock now
        problem = Problem(error=code, message=message, retry_after=retry_after)
        response = view_response(problem, 503)
    response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def downstream_unusable(exc: DownstreamUnusable) -> Response:
    """503 where a payment is shown with the built-in downstream's record and its SQLite
    file cannot be read: named by its safe name (ledger/downstream.py), never its path."""
    problem = Problem(error="downstream_unavailable", message=str(exc))
    log.warning(orjson.dumps({"path": request.path, "status": 503, "error": str(exc)}).decode())
    if on_dashboard():
        return Response(render_template("ops/problem.html", problem=problem), 503)
    return view_response(problem, 503)


def refused_write(exc: ResponseError) -> Response:
    """One of :data:`REFUSED_WRITES` is answered as unavailable; any other ResponseError goes
    on to Flask's 500."""
    if not str(exc).startswith(REFUSED_WRITES):
        raise exc
    return answer(exc)


def on_dashboard() -> bool:
    """The request is for a dashboard page (answered with a page), not the API's JSON."""
    return request.path.startswith("/ops/") and not request.path.startswith("/ops/api/")


def init_app(app: Flask) -> None:
    for kind in UNAVAILABLE:
        app.register_error_handler(kind, answer)
    app.register_error_handler(ResponseError, refused_write)  # its subclasses above are answered
    app.register_error_handler(DownstreamUnusable, downstream_unusable)
