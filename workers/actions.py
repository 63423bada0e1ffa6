"""Downstream actions: what "fulfilling a payment" does, and whether it is replay-safe.

An action is called with the payment's :class:`~ledger.purchase.Purchase` (a
``module:function`` gets it as a dict, HTTP as the JSON body) and returns a receipt (a
small JSON-able dict). It raises TransientDownstreamError to be retried and
PermanentDownstreamError to fail. ``replay_safe`` says whether calling it twice with the
same idempotency key has one effect; only then is an interrupted attempt re-run
automatically.
"""

import email.utils
import os
import sqlite3
import time
from collections.abc import Callable, Generator
from typing import Any, Protocol
from urllib.parse import urljoin

import requests
from psycopg.conninfo import conninfo_to_dict

from ledger import limits
from ledger import settings as settings_module
from ledger.downstream import downstream_name, short_digest
from ledger.purchase import Purchase
from ledger.purchase_reads import reads_intents
from ledger.redact import origin, redact
from ledger.setting_fields import refuse
from ledger.setting_kinds import ActionSpec
from ledger.settings import Settings
from ledger.stripe_api import key_refused
from workers import postgres_schema, sqlite_action
from workers.effects import Effect, as_receipt, imported, load_effect, load_reversal_effect
from workers.exceptions import (
    ActionConfigError,
    AmbiguousDownstreamError,
    PermanentDownstreamError,
    TransientDownstreamError,
)
from workers.postgres_action import PostgresAction
from workers.sqlite_action import SqliteAction

Receipt = dict[str, Any]


class Action(Protocol):
    replay_safe: bool

    def __call__(self, purchase: Purchase) -> Receipt: ...


def downstream_of(action: Action) -> str:
    """The action's name for its downstream, which a payment keeps for each downstream its
    replay-safe calls may have reached (``called_on``): a settlement settles only on that
    one (docs/REVERSAL.md). Hashed where the target may hold a secret (a capability URL's
    path, a password: masked first, so a new password is the same database)."""
    if isinstance(action, SqliteAction):
        return downstream_name(action.path)
    if isinstance(action, PostgresAction):
        return "postgresql:" + short_digest(postgres_identity(action.url))
    if isinstance(action, HttpAction):
        return "http:" + short_digest(action.url)
    if isinstance(action, CallableAction):
        return "function:" + action.target
    return ""


def postgres_identity(url: str) -> str:
    """What tells one PostgreSQL database (and the effects table its user's search path
    finds) from another, as libpq reads the URL: host, port, database, user, options; not
    the password, nor how it connects (sslmode, timeouts, application_name)."""
    params = conninfo_to_dict(url)
    params["host"] = str(params.get("host", "")).lower()
    params.setdefault("port", "5432")
    kept = ("host", "hostaddr", "port", "dbname", "user", "options", "service")
    return " ".join(f"{k}={params[k]}" for k in kept if params.get(k) not in (None, ""))


def settler(action: Action) -> Callable[[Purchase], Receipt] | None:
    """The action's ``settle`` (the built-in SQLite and PostgreSQL actions): after an attempt
    that may have applied, the payment taken back, it finds the payment's key or voids it in
    one transaction (docs/REVERSAL.md). None for an action that cannot."""
    return getattr(action, "settle", None)


class HttpAction:
    """POST the payment as JSON with a stable Idempotency-Key header, to FULFILMENT_ACTION's
    URL and nowhere else: a redirect is never followed (requests follows 3xx by default,
    turning a POST into a GET of another page or re-POSTing the purchase to another host),
    so only this URL's own answer can fulfil a payment. Its errors name the downstream by
    its origin only (scheme, host, port), with the error's class, the OS's reason and the
    status: never the URL's path, ``;params`` or query, where a capability URL keeps its
    secret, nor the answer's body, which may quote them."""

    def __init__(
        self, url: str, timeout: float, replay_safe: bool, setting: str = "FULFILMENT_ACTION"
    ) -> None:
        self.url = url
        self.origin = origin(url)
        self.timeout = timeout
        self.replay_safe = replay_safe
        self.setting = setting  # the one that names it: FULFILMENT_ACTION, REVERSAL_ACTION

    def __call__(self, purchase: Purchase) -> Receipt:
        try:
            with Unredirected() as session:
                answer = session.post(
                    self.url,
                    json=purchase.to_dict(),
                    headers={"Idempotency-Key": purchase.idempotency_key},
                    timeout=self.timeout,
                    allow_redirects=False,
                )
        except (requests.ConnectionError, requests.ConnectTimeout) as exc:
            if isinstance(exc, requests.ConnectTimeout) or _never_sent(exc):
                raise TransientDownstreamError(self._failed(exc), down=True, sent=False) from exc
            raise AmbiguousDownstreamError(self._failed(exc)) from exc
        except requests.RequestException as exc:  # read timeout and the like: it may have applied
            raise AmbiguousDownstreamError(self._failed(exc)) from exc
        return self._answered(answer)

    def _answered(self, answer: requests.Response) -> Receipt:
        """The receipt of a 2xx or 409 (already applied), else the error its status means."""
        status = answer.status_code
        if 200 <= status < 300 or status == 409:
            return {"status": status, "body": answer.text[:200]}
        refused = f"http {status} from {self.origin}"
        if 300 <= status < 400:  # it reached a server that may have acted on it
            raise AmbiguousDownstreamError(redirected(self.url, answer, self.setting))
        if status in (502, 504):  # a gateway's answer: the origin may have applied it
            raise AmbiguousDownstreamError(refused, down=True)
        if status in (429, 503):  # the downstream as a whole refuses for now
            wait = retry_after(answer.headers.get("Retry-After", ""))
            raise TransientDownstreamError(refused, down=True, retry_after=wait)
        if status >= 500:  # this payment's failure while the downstream answers
            raise TransientDownstreamError(refused)
        raise PermanentDownstreamError(refused)

    def _failed(self, exc: requests.RequestException) -> str:
        """``http: ConnectionError (Connection refused) calling http://host:port``."""
        return f"http: {type(exc).__name__}{_os_reason(exc)} calling {self.origin}"


class Unredirected(requests.Session):
    """A session (one per call, as ``requests.post`` makes) that neither follows nor
    prepares a redirect: with ``allow_redirects=False`` requests still parses a 3xx's
    Location to prepare the next request, and raises ValueError on one it cannot parse."""

    def resolve_redirects(
        self, *args: Any, **kwargs: Any
    ) -> Generator[requests.Response, None, None]:
        yield from ()


def redirected(url: str, answer: requests.Response, setting: str = "FULFILMENT_ACTION") -> str:
    """What a 3xx answer to ``url`` says, naming both ends by origin only: a permanent move
    (301, 308) is a misconfiguration a person fixes in ``setting``."""
    status, location = answer.status_code, answer.headers.get("Location", "").strip()
    try:
        to = origin(urljoin(url, location)) if location else "none"
    except ValueError:  # urljoin refuses some (an unclosed IPv6 bracket): no origin to name
        to = origin("")
    said = f"http {status} from {origin(url)}"
    if status in (301, 308):
        fix = f"{setting} should name the new URL"
        return f"{said}: the endpoint moved (Location on {to}); {fix}"
    return f"{said}: a redirect (Location on {to}), not followed"


def retry_after(header: str) -> float:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date), else 0."""
    header = header.strip()
    if header.isascii() and header.isdigit():  # str.isdigit() also takes '²' and '١٢'
        return float(header)
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return 0.0
    return max(when.timestamp() - time.time(), 0.0)


def _never_sent(exc: requests.ConnectionError) -> bool:
    """True when the connection itself failed (refused, DNS), so the request never left."""
    text = str(exc)
    return any(s in text for s in ("Connection refused", "NewConnectionError", "Name or service"))


def _os_reason(exc: BaseException) -> str:
    """`` (Connection refused)``: the OS's words for the first errno in the exception's
    chain (causes, contexts, urllib3's ``reason``), which name no URL; else ''."""
    todo, seen = [exc], set()
    while todo:
        err = todo.pop(0)
        if id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, OSError) and isinstance(err.errno, int) and err.errno > 0:
            return f" ({os.strerror(err.errno)})"
        linked = (err.__cause__, err.__context__, getattr(err, "reason", None), *err.args)
        todo += [e for e in linked if isinstance(e, BaseException)]
    return ""


class CallableAction:
    """A user's ``module:function`` taking the purchase as a dict (``Purchase.to_dict()``);
    same contract as the others. What it returns is made JSON-able as an effect's receipt
    is (a Decimal or a datetime as its text): the call has applied by then, so a receipt
    the ledger could not store must not turn it into a crashed job."""

    def __init__(self, target: str, replay_safe: bool, setting: str = "FULFILMENT_ACTION") -> None:
        self.target = target
        self.fn: Callable[[dict[str, Any]], Any] = imported(target, setting)
        self.replay_safe = bool(getattr(self.fn, "replay_safe", replay_safe))

    def __call__(self, purchase: Purchase) -> Receipt:
        try:
            result = self.fn(purchase.to_dict())
        except (TransientDownstreamError, PermanentDownstreamError):
            raise
        except Exception as exc:  # unknown how far it got: retried only if replay-safe
            raise AmbiguousDownstreamError(f"{type(exc).__name__}: {exc}") from exc
        return as_receipt(result)


def build_action(s: Settings) -> Action:
    """The action FULFILMENT_ACTION names (its kind parsed it: ledger/setting_kinds.py), with
    the effect FULFILMENT_SQL or FULFILMENT_EFFECT names for the built-in downstreams."""
    return _built(
        s.FULFILMENT_ACTION, s.FULFILMENT_TIMEOUT, s.FULFILMENT_REPLAY_SAFE, load_effect(s)
    )


def build_reversal_action(s: Settings) -> Action | None:
    """The action REVERSAL_ACTION names (None when unset: no reversal). The built-in
    downstreams record the reversal's key and run REVERSAL_SQL in one transaction (SQLite's
    also marks its order reversed)."""
    if s.REVERSAL_ACTION is None:
        return None
    effect = load_reversal_effect(s)
    spec = s.REVERSAL_ACTION
    return _built(spec, s.FULFILMENT_TIMEOUT, s.REVERSAL_REPLAY_SAFE, effect, "REVERSAL_ACTION")


def _built(
    spec: ActionSpec,
    timeout: float,
    replay_safe: bool,
    effect: Effect | None,
    setting: str = "FULFILMENT_ACTION",
) -> Action:
    if spec.scheme == "sqlite":  # the built-in downstream (Settings.sqlite_downstream)
        return SqliteAction(spec.target, effect, timeout)
    if spec.scheme == "postgresql":  # the user's own database (workers/postgres_action.py)
        return PostgresAction(spec.target, timeout, effect)
    if spec.scheme == "http":
        return HttpAction(spec.target, timeout, replay_safe, setting)
    return CallableAction(spec.target, replay_safe, setting)


def unusable(s: Settings) -> tuple[str, str] | None:
    """Why the configured action cannot run (the setting to change, what is wrong), or None:
    its module imported, its URL prepared as requests would send it and not moved for good
    (``moved``), its SQLite file created and writable, its PostgreSQL database reached and
    its table there, FULFILMENT_SQL accepted by the database; REVERSAL_ACTION's likewise. A
    worker checks this when it starts (workers/rq_config.py), before its first job."""
    setting = "REVERSAL_ACTION"
    try:
        reversal = build_reversal_action(s)
        found = _problem(reversal, setting, s.FULFILMENT_TIMEOUT) if reversal else None
        if found:
            return found
        setting = "FULFILMENT_ACTION"
        return _problem(build_action(s), setting, s.FULFILMENT_TIMEOUT)
    except ActionConfigError as exc:
        return exc.setting, redact(f"{type(exc).__name__}: {exc}")
    except (sqlite3.Error, OSError, requests.RequestException) as exc:
        return setting, redact(f"{type(exc).__name__}: {exc}")


def _problem(action: Action, setting: str, timeout: float) -> tuple[str, str] | None:
    """What is wrong with the action ``setting`` names (the setting to change, why): a
    built-in downstream's database and effect, an HTTP one's URL (prepared as requests
    would send it, not moved for good)."""
    if isinstance(action, SqliteAction):
        return sqlite_action.problem(action.path, action.effect, setting)
    if isinstance(action, PostgresAction):
        return postgres_schema.problem(action.url, action.effect, setting)
    if isinstance(action, HttpAction):
        try:
            requests.Request("POST", action.url).prepare()
        except requests.RequestException as exc:  # its message quotes the whole URL
            return setting, f"{type(exc).__name__}: requests cannot send to {action.origin}"
        gone = moved(action.url, timeout, setting)
        return (setting, gone) if gone else None
    return None


def moved(url: str, timeout: float, setting: str = "FULFILMENT_ACTION") -> str | None:
    """Whether ``url`` has moved for good, asked with one ``HEAD`` (RFC 9110: a safe
    method, no body, no purchase, no Idempotency-Key; what uptime checks send) that
    follows no redirect: a 301 or 308 names the misconfiguration, anything else, no answer
    included, is left to the calls (a downstream down at start-up is the breaker's)."""
    try:
        with Unredirected() as session:
            wait = min(timeout, limits.MOVED_CHECK_SECONDS)
            answer = session.head(url, timeout=wait, allow_redirects=False)
    except requests.RequestException:
        return None
    return redirected(url, answer, setting) if answer.status_code in (301, 308) else None


def settings_or_exit() -> Settings:
    """A worker's start: the settings checked, then the action resolved; else one line per
    problem and exit code 2 (``rq worker -c workers.rq_config`` and ``fulfilment-worker``)."""
    s = settings_module.load_or_exit()
    found = unusable(s)
    if found:
        refuse(s, *found)
    refused = key_refused(s, s.CHECKOUT_LINE_ITEMS, reads_intents(s))
    if refused:
        refuse(s, "STRIPE_API_KEY", refused)
    return s
