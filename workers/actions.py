"""Downstream actions: what "fulfilling a payment" does, and whether it is replay-safe.

An action is called with the payment's :class:`~ledger.purchase.Purchase` (a
``module:function`` gets it as a dict, HTTP as the JSON body) and returns a receipt (a
small JSON-able dict). It raises TransientDownstreamError to be retried and
PermanentDownstreamError to fail. ``replay_safe`` says whether calling it twice with the
same idempotency key has one effect; only then is an interrupted attempt re-run
automatically.
"""

import logging
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol

import requests

from ledger import limits
from ledger import settings as settings_module
from ledger.breakers import downstream_named
from ledger.purchase import Purchase
from ledger.purchase_reads import reads_intents
from ledger.redact import downstream, redact
from ledger.setting_fields import refuse
from ledger.setting_urls import ActionSpec
from ledger.settings import Settings, effect_lines
from ledger.stripe_api import key_refused
from workers import postgres_schema, sqlite_action
from workers.effects import Effect, as_receipt, imported, load_effect, load_reversal_effect
from workers.exceptions import (
    ActionConfigError,
    AmbiguousDownstreamError,
    PermanentDownstreamError,
    TransientDownstreamError,
)
from workers.http_action import HttpAction, Unredirected, redirected
from workers.merchant_code import unexpected
from workers.postgres_action import PostgresAction
from workers.sqlite_action import SqliteAction

Receipt = dict[str, Any]
log = logging.getLogger("workers.actions")


class Action(Protocol):
    replay_safe: bool

    def __call__(self, purchase: Purchase) -> Receipt: ...


def downstream_of(action: Action) -> str:
    """The action's name for its downstream, which a payment keeps for each downstream its
    replay-safe calls may have reached (``called_on``): a settlement settles only on that
    one (docs/REVERSAL.md), and the calls of each have a circuit breaker of their own
    (ledger/breakers.py, which names it). An action wrapping another (prove-action's
    worker) names it ``wrapped``."""
    wrapped = getattr(action, "wrapped", None)
    if wrapped is not None:
        return downstream_of(wrapped)
    if isinstance(action, SqliteAction):
        return downstream_named("sqlite", action.path)
    if isinstance(action, PostgresAction):
        return downstream_named("postgresql", action.url)
    if isinstance(action, HttpAction):
        return downstream_named("http", action.url)
    if isinstance(action, CallableAction):
        return downstream_named("callable", action.target)
    return ""


def settler(action: Action) -> Callable[[Purchase], Receipt] | None:
    """The action's ``settle`` (the built-in SQLite and PostgreSQL actions): after an attempt
    that may have applied, the payment taken back, it finds the payment's key or voids it in
    one transaction (docs/REVERSAL.md). None for an action that cannot."""
    return getattr(action, "settle", None)


class CallableAction:
    """A user's ``module:function`` taking the purchase as a dict (``Purchase.to_dict()``);
    same contract as the others. What it returns is made JSON-able as an effect's receipt
    is (a Decimal or a datetime as its text): the call has applied by then, so a receipt
    the ledger could not store must not turn it into a crashed job. Anything it raises but
    the exceptions of workers/api.py is a bug of its own: its error says where it was
    raised, and the worker logs its traceback (workers/merchant_code.py)."""

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
            # a bug: where it was raised, and its traceback in the log (workers/merchant_code.py)
            raise AmbiguousDownstreamError(unexpected(exc, self.target, purchase)) from exc
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
    refused = key_refused(s, s.CHECKOUT_LINE_ITEMS, reads_intents(s), s.INVOICE_LINES)
    if refused:
        refuse(s, "STRIPE_API_KEY", refused)
    say_effects(s)
    say_replay_safety(s)
    return s


def say_effects(s: Settings) -> None:
    """The worker's start-up line for each built-in database action: what it runs beside the
    key, a warning when nothing does (its payments go fulfilled with receipt ``{}``); logged
    at WARNING so ``rq worker``, whose logging is set up later, shows it too."""
    for setting, effect in effect_lines(s):
        level = logging.WARNING if effect.startswith("effect: none") else logging.INFO
        log.log(level, "%s %s: %s", setting, downstream(str(getattr(s, setting))), effect)


def say_replay_safety(s: Settings) -> None:
    """The worker's start-up line for each action: replay-safe or not, and what says so
    (the function's ``@replay_safe`` wins over the setting: it is the code's own word).
    Which row of the guarantees applies is then read from the log, not guessed."""
    for setting, action in (
        ("FULFILMENT_ACTION", build_action(s)),
        ("REVERSAL_ACTION", build_reversal_action(s)),
    ):
        if action is None:
            continue
        flag = setting.replace("_ACTION", "_REPLAY_SAFE")
        if isinstance(action, CallableAction) and hasattr(action.fn, "replay_safe"):
            why = "@replay_safe on the function, whatever " + flag + " says"
        elif settler(action) is not None:
            why = "built-in: its key is recorded with the effect"
        else:
            why = f"{flag}={str(getattr(s, flag)).lower()}"
        said = "replay-safe" if action.replay_safe else "not replay-safe"
        log.info("%s %s: %s (%s)", setting, downstream(str(getattr(s, setting))), said, why)
