"""The landing page's trigger in the ops API: ``/ops/api/checkout-sessions/{id}/fulfil``.

A merchant's server calls it from its success page with a bearer ops token (no CSRF token:
webhook/http.py ``csrf_ok``). POST retrieves the session from Stripe's API and records it
(ledger/landing.py), so a paid session is fulfilled once whichever trigger comes first; GET
answers the session's payment state from the ledger alone, for polling."""

import logging
import math

import orjson
from flask import Blueprint, Response, current_app

from ledger import landing, limits
from ledger.read.base import Problem
from ledger.read.sessions import SessionFulfilment
from ledger.stripe_api import StripeApi, StripeRefused, StripeUnavailable
from webhook.http import csrf_ok, operator, require_ops, view_response
from webhook.ops import csrf_refused
from webhook.store import current_settings, get_ledger, get_redis

bp = Blueprint("ops_landing", __name__, url_prefix="/ops/api/checkout-sessions")
log = logging.getLogger("webhook.landing")
API = "webhook_ledger_stripe_api"


@bp.before_request
def require_ops_token() -> Response | None:
    return require_ops("Bearer")


def stripe_api() -> StripeApi | None:
    """This process's client of Stripe's API (None without STRIPE_API_KEY)."""
    if not current_settings().STRIPE_API_KEY:
        return None
    api = current_app.extensions.get(API)
    if api is None:
        api = StripeApi(
            get_redis(), current_settings(), slot_wait_s=limits.LANDING_RATE_WAIT_SECONDS
        )
        current_app.extensions[API] = api
    return api


def unavailable(error: str, message: str, retry_after_s: float = 0) -> Response:
    response = view_response(Problem(error=error, message=message), 503)
    if retry_after_s:
        response.headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
    return response


def unknown(exc: landing.SessionUnknown) -> Response:
    return view_response(Problem(error="unknown_session", message=str(exc)), 404)


@bp.get("/<session_id>/fulfil")
def session_state(session_id: str) -> Response:
    try:
        return view_response(landing.state(get_redis(), session_id))
    except landing.SessionUnknown as exc:
        return unknown(exc)


@bp.post("/<session_id>/fulfil")
def fulfil_session(session_id: str) -> Response:
    if not csrf_ok():
        return csrf_refused()
    api = stripe_api()
    try:
        if api is None:
            return _from_ledger_only(session_id)
        answer = landing.fulfil(get_ledger(), api, session_id, operator("ops"))
    except landing.SessionUnknown as exc:
        return unknown(exc)
    except landing.SessionNotPaying as exc:
        problem = Problem(
            error="session_not_paid", message=str(exc), payment_status=exc.payment_status
        )
        return view_response(problem, 409)
    except StripeUnavailable as exc:
        retry = exc.retry_after or limits.LANDING_RETRY_AFTER_SECONDS
        return unavailable("stripe_api_unavailable", str(exc), retry)
    except StripeRefused as exc:
        return unavailable("stripe_api_refused", str(exc))
    if answer.recorded:
        line = {"session": session_id, "payment": answer.payment_key, "by": operator("ops")}
        log.info(orjson.dumps({"checkout_session_recorded": line}).decode())
    return view_response(answer)


def _from_ledger_only(session_id: str) -> Response:
    """Without STRIPE_API_KEY: a payment the ledger knows is paid is answered; anything
    else would need Stripe's word."""
    landing.check_id(session_id)
    found: SessionFulfilment | None = None
    try:
        found = landing.state(get_redis(), session_id)
    except landing.SessionUnknown:
        pass
    if found is not None and found.state != "pending":
        return view_response(found)
    message = "STRIPE_API_KEY is not set: the session cannot be read from Stripe's API"
    return unavailable("stripe_api_key_missing", message)
