"""What the blueprints share: JSON answers (the typed objects of ledger/read/), the
OPS_TOKEN tokens as a bearer token or HTTP basic password (compared in constant time; the
matching token's label names who acts), the CSRF token of the few routes that change
anything (asked of basic auth and forms, never of a bearer token), query arguments (a bad
one is a 400 that says why), a bulk decision's filters from the request, pausing and
resuming fulfilment."""

import base64
import hashlib
import hmac
import re
from collections.abc import Sequence
from datetime import UTC, datetime

import orjson
from flask import Response, g, request

from ledger.decisions import STATES, decide_bulk
from ledger.gate import Gate
from ledger.read import fulfilment
from ledger.read.base import Problem, to_json
from ledger.read.decisions import BulkDecision
from ledger.read.fulfilment import Fulfilment
from webhook.store import current_attempts, current_settings, get_redis

MAX_OFFSET = 10_000
RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:[0-5]\d)", re.ASCII)
"""A time the API takes (datetime.fromisoformat checks each field's range but an offset's
minutes: it reads +05:60 as +06:00)."""
LOCAL_TIME = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(:\d\d(\.\d+)?)?", re.ASCII)
"""A browser's datetime-local value, which the dashboard also takes."""
LEAP_SECOND = re.compile(r"(?<=[T ]\d\d:\d\d:)60", re.ASCII)
"""A seconds field of 60 (in the time upper-cased), which a datetime cannot hold."""
PROBLEM_STATUS = {
    "unknown_decision": 400,
    "bad_argument": 400,
    "unknown_state": 400,
    "not_found": 404,
    "refused": 409,
    "attempt_may_still_be_running": 409,
    "grant_by_hand": 409,
    "not_taken_back": 409,
    "not_replicated": 503,
}


class BadArgument(ValueError):
    """A query argument that is not what the route takes; answered 400 with ``problem``."""

    def __init__(self, name: str, wanted: str) -> None:
        super().__init__(f"{name}: {wanted}")
        self.problem = Problem(error="bad_argument", message=f"{name} must be {wanted}")


def json_response(payload: dict[str, object], status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype="application/json")


def view_response(view: object, status: int = 200) -> Response:
    """A typed object (ledger/read/) as the JSON answer."""
    return Response(to_json(view), status=status, mimetype="application/json")


def problem_response(problem: Problem) -> Response:
    return view_response(problem, PROBLEM_STATUS.get(problem.error, 400))


def presented_token() -> str:
    """The token the request carries: ``Bearer <token>`` or basic auth's password."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except ValueError:  # not base64 (binascii.Error), not ASCII, not UTF-8 once decoded
            return ""
        return decoded.partition(":")[2]
    return ""


def token_ok(expected: str, given: str) -> bool:
    """Constant-time comparison; an unset expected token never matches."""
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def matching_token(tokens: Sequence[str], given: str) -> int | None:
    """The position of ``given`` among ``tokens``: every token is compared, in constant time,
    whichever matches (so the time tells nothing about which token, or how many)."""
    found = None
    for position, token in enumerate(tokens):
        if hmac.compare_digest(given.encode(), token.encode()) and found is None:
            found = position
    return found


def require_ops(challenge: str) -> Response | None:
    """A 401 answer unless the request carries one of the ops tokens; None when it does, and
    the token's position is kept for :func:`operator` and :func:`csrf_ok`."""
    found = matching_token(current_settings().OPS_TOKEN, presented_token())
    if found is None:
        return unauthorized(challenge)
    g.ops_token_index = found
    return None


def operator(channel: str) -> str:
    """Who acts, as recorded: ``channel:`` and the label of the token the request carries
    (the basic-auth user name is not authenticated, so never that)."""
    return f"{channel}:{current_settings().ops_token_labels[g.ops_token_index]}"


def request_csrf() -> str:
    """The CSRF token of the ops token this request carries."""
    return csrf_token(current_settings().OPS_TOKEN[g.ops_token_index])


def unauthorized(challenge: str) -> Response:
    message = "send OPS_TOKEN as a bearer token, or as the password of HTTP basic auth"
    response = view_response(Problem(error="unauthorized", message=message), 401)
    response.headers["WWW-Authenticate"] = f'{challenge} realm="ops"'
    return response


def require_token(expected: str, challenge: str) -> Response | None:
    """A 401 answer unless the request carries ``expected``; None when it does."""
    return None if token_ok(expected, presented_token()) else unauthorized(challenge)


def csrf_token(ops_token: str) -> str:
    """Derived from the ops token: a page from another site cannot read it, so cannot send it."""
    return hmac.new(ops_token.encode(), b"ops-csrf-v1", hashlib.sha256).hexdigest()


def csrf_ok() -> bool:
    """Whether the request needs no CSRF token or carries its ops token's (header or form
    field). A request authenticated with ``Authorization: Bearer`` needs none: a browser
    never sends a bearer token by itself, so a page from another site cannot make one.
    Basic auth, which a browser repeats on its own, and the dashboard's forms need it."""
    scheme = request.headers.get("Authorization", "").partition(" ")[0]
    if scheme.lower() == "bearer":
        return True
    given = request.headers.get("X-CSRF-Token") or request.form.get("csrf_token", "")
    return token_ok(request_csrf(), given)


def int_arg(name: str, default: int, low: int = 0, high: int = MAX_OFFSET) -> int:
    """A whole-number query argument from ``low`` to ``high``; BadArgument otherwise."""
    given = request.args.get(name)
    if given is None:
        return default
    if not (given.isascii() and given.isdigit() and low <= int(given) <= high):
        raise BadArgument(name, f"a whole number from {low} to {high}")
    return int(given)


def time_arg(name: str, strict: bool = True) -> int | None:
    """A time as epoch ms: in the API an RFC 3339 date-time (``2026-01-02T03:04:05Z``), on
    the dashboard also a browser's datetime-local value (taken as UTC)."""
    given = request.args.get(name)
    if given is None or (given == "" and not strict):
        return None
    wanted = "an RFC 3339 time such as 2026-01-02T03:04:05Z"
    if not (RFC3339.fullmatch(given) or (not strict and LOCAL_TIME.fullmatch(given))):
        raise BadArgument(name, wanted)
    try:  # a leap second is the second before it here
        moment = datetime.fromisoformat(LEAP_SECOND.sub("59", given.upper()))
    except ValueError:
        raise BadArgument(name, wanted) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def flag_arg(name: str) -> bool:
    """A yes/no query argument: 1 or 0 (absent: no)."""
    given = request.args.get(name, "0")
    if given not in ("0", "1"):
        raise BadArgument(name, "1 or 0")
    return given == "1"


def change_pause(action: str, who: str) -> Fulfilment:
    """Pause (with the ``reason`` field, cut to 200 characters) or resume fulfilment for
    every worker; the state of fulfilment after it."""
    redis, s = get_redis(), current_settings()
    shared = Gate(redis, s)
    if action == "pause":
        shared.pause(who, (request.values.get("reason") or "")[:200])
    else:
        shared.resume(who)
    return fulfilment.status(redis, s)


def decide_bulk_from_request(action: str, dry_run: bool, who: str) -> BulkDecision:
    """A bulk retry (or resolve as not applied) with the request's ``state``, ``since`` and
    ``error`` filters; BadFilter when one is wrong."""
    given = request.values
    state = given.get("state") or STATES[action][0]
    since, error = given.get("since", ""), given.get("error", "")[:200]
    return decide_bulk(current_attempts(), action, state, since, error, dry_run, who)
