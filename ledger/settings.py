"""The service's settings, read from the environment by the web app, the workers and the CLI.

Each setting is declared once, as a field of :class:`Settings` (ledger/setting_list.py).
The rules between settings are :func:`rule_problems`, in order. Every process loads them
at start-up and refuses to start with one line per problem (:func:`load_or_exit`);
docs/CONFIGURATION.md's table is rendered from the same fields (scripts/settings_table.py).
Constants that are not settings: ledger/limits.py.
"""

import os
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import cast
from urllib.parse import parse_qs, urlsplit

from ledger import limits, setting_fields
from ledger.redis_url import redis_py_refusal
from ledger.setting_fields import SettingsError, field_named, kind_of, misspelt, or_exit, read
from ledger.setting_kinds import DIGITS, digits_value
from ledger.setting_list import Settings, fingerprint

__all__ = ["Settings", "SettingsError", "fingerprint", "load", "load_or_exit"]


DEFAULT_REDIS_URL = field_named(Settings, "REDIS_URL").default
ELSEWHERE = frozenset(
    {
        *("WEB_PORT", "PORT", "HOST", "WEB_CONCURRENCY", "GUNICORN_WORKER_CONNECTIONS"),
        *("GUNICORN_THREADS", "GUNICORN_WORKER_CLASS", "GUNICORN_REUSE_PORT"),
        *("GUNICORN_ACCESS_LOG", "LOG_LEVEL", "WORKERS", "REDIS_PORT"),
    }
)
"""The settings the web process (webhook/serving.py ``Server``) and scripts/run.sh
(ledgerctl/run_local.py ``Local``) declare, which this layer cannot import: known here, so
every process takes them for settings and names a slip of one."""
KNOWN = frozenset(f.name for f in fields(Settings)) | ELSEWHERE
REVERSAL_CHOICES = ("REVERSAL_REPLAY_SAFE", "REVERSAL_PER_REFUND", "REVERSAL_DISPUTE_WON")
"""The settings that only shape what REVERSAL_ACTION does: any but their default without it
is refused, as REVERSAL_SQL and REVERSAL_EFFECT are."""


def url_database(url: str) -> tuple[str, int]:
    """A Redis URL's scheme and database number (``/N`` or ``?db=N``; 0 when neither)."""
    parts = urlsplit(url.strip())
    path = parts.path.strip("/") if parts.scheme != "unix" else ""
    db = parse_qs(parts.query).get("db", [path])[0]
    number = digits_value(db) if DIGITS.fullmatch(db) else None
    return parts.scheme, number or 0


def rule_problems(s: Settings, failed: set[str]) -> list[tuple[str, str]]:
    """The rules between settings, in order: (the setting to change, what is expected of
    it). A rule is skipped when one of the settings it reads is itself wrong (``failed``)."""
    found: list[tuple[str, str]] = []

    def rule(names: str, broken: bool, name: str, expected: str) -> None:
        if broken and not failed.intersection(names.split()):
            found.append((name, expected))

    lease = s.FULFILMENT_TIMEOUT + limits.LEASE_MARGIN_SECONDS
    rule(
        "PAYMENT_RETENTION_DAYS EVENT_RETENTION_DAYS",
        0 < s.PAYMENT_RETENTION_DAYS <= s.EVENT_RETENTION_DAYS,
        "PAYMENT_RETENTION_DAYS",
        f"expected 0 (keep) or more than EVENT_RETENTION_DAYS ({s.EVENT_RETENTION_DAYS}): "
        "a late resend must never fulfil a payment twice",
    )
    rule(
        "LEASE_SECONDS FULFILMENT_TIMEOUT",
        s.LEASE_SECONDS < lease,
        "LEASE_SECONDS",
        f"expected at least FULFILMENT_TIMEOUT ({s.FULFILMENT_TIMEOUT:g}) + "
        f"{limits.LEASE_MARGIN_SECONDS} = {lease:g} seconds: a call must end before its lease does",
    )
    margin = s.FULFILMENT_KILL_MARGIN_SECONDS
    rule(
        "FULFILMENT_KILL_MARGIN_SECONDS LEASE_SECONDS FULFILMENT_TIMEOUT",
        s.LEASE_SECONDS >= lease and s.FULFILMENT_TIMEOUT + 2 * margin >= s.LEASE_SECONDS,
        "FULFILMENT_KILL_MARGIN_SECONDS",
        f"expected FULFILMENT_TIMEOUT ({s.FULFILMENT_TIMEOUT:g}) + 2 x {margin:g} under "
        f"LEASE_SECONDS ({s.LEASE_SECONDS}): a call that will not stop ends with its process "
        "before its lease can expire",
    )
    rule(
        "LEDGER_MIN_REPLICAS LEDGER_WAIT_TIMEOUT REDIS_SOCKET_TIMEOUT",
        bool(s.LEDGER_MIN_REPLICAS) and s.LEDGER_WAIT_TIMEOUT >= s.REDIS_SOCKET_TIMEOUT,
        "LEDGER_WAIT_TIMEOUT",
        f"expected under REDIS_SOCKET_TIMEOUT ({s.REDIS_SOCKET_TIMEOUT:g}) while "
        "LEDGER_MIN_REPLICAS is set: a client that gives up on the WAIT first would retry "
        "the write",
    )
    refusal = redis_py_refusal(s.REDIS_URL)
    rule("REDIS_URL", refusal is not None, "REDIS_URL", refusal or "")
    url_scheme, url_db = url_database(s.REDIS_URL)
    url_tls = url_scheme == "rediss"
    rule(
        "REDIS_URL REDIS_SENTINELS REDIS_SENTINEL_DB REDIS_SENTINEL_TLS",
        bool(s.REDIS_SENTINELS)
        and s.REDIS_URL != DEFAULT_REDIS_URL
        and (url_db != s.REDIS_SENTINEL_DB or (url_tls and not s.REDIS_SENTINEL_TLS)),
        "REDIS_URL",
        f"unused with REDIS_SENTINELS, yet it names database {url_db}"
        f"{' over TLS' if url_tls else ''}: expected unset, with REDIS_SENTINEL_DB={url_db}"
        f"{' and REDIS_SENTINEL_TLS=true' if url_tls else ''} for the Sentinels' primary",
    )
    rule(
        "FULFILMENT_SQL FULFILMENT_EFFECT",
        bool(s.FULFILMENT_SQL and s.FULFILMENT_EFFECT),
        "FULFILMENT_EFFECT",
        "expected FULFILMENT_SQL or FULFILMENT_EFFECT, not both: one effect per payment",
    )
    rule(
        "FULFILMENT_ACTION FULFILMENT_SQL FULFILMENT_EFFECT",
        bool(s.FULFILMENT_SQL or s.FULFILMENT_EFFECT)
        and s.FULFILMENT_ACTION.scheme not in ("sqlite", "postgresql"),
        "FULFILMENT_SQL" if s.FULFILMENT_SQL else "FULFILMENT_EFFECT",
        "expected unset while FULFILMENT_ACTION is not sqlite:/// or postgresql://: the effect "
        "runs in the built-in downstreams' transaction",
    )
    rule(
        "REVERSAL_SQL REVERSAL_EFFECT",
        bool(s.REVERSAL_SQL and s.REVERSAL_EFFECT),
        "REVERSAL_EFFECT",
        "expected REVERSAL_SQL or REVERSAL_EFFECT, not both: one effect per reversal",
    )
    reversal_effect = "REVERSAL_SQL" if s.REVERSAL_SQL else "REVERSAL_EFFECT"
    rule(
        "REVERSAL_ACTION REVERSAL_SQL REVERSAL_EFFECT",
        bool(s.REVERSAL_SQL or s.REVERSAL_EFFECT) and s.REVERSAL_ACTION is None,
        reversal_effect,
        "REVERSAL_ACTION is not set, so it would never run: expected REVERSAL_ACTION naming "
        "the database (FULFILMENT_ACTION's URL to revoke in the same database), or this unset",
    )
    rule(
        "REVERSAL_ACTION REVERSAL_SQL REVERSAL_EFFECT",
        bool(s.REVERSAL_SQL or s.REVERSAL_EFFECT)
        and s.REVERSAL_ACTION is not None
        and s.REVERSAL_ACTION.scheme not in ("sqlite", "postgresql"),
        reversal_effect,
        "expected unset while REVERSAL_ACTION is not sqlite:/// or postgresql://: the effect "
        "runs in the built-in downstreams' transaction",
    )
    for name in REVERSAL_CHOICES:  # the ledger scripts get reverse_on 0 without the action
        rule(
            f"REVERSAL_ACTION {name}",
            getattr(s, name) != getattr(Settings, name) and s.REVERSAL_ACTION is None,
            name,
            "REVERSAL_ACTION is not set, so no payment is reversed and this would change "
            "nothing: expected REVERSAL_ACTION naming what takes a payment back "
            "(docs/REVERSAL.md), or this unset",
        )
    rule(
        "RETRY_BASE_SECONDS RETRY_MAX_SECONDS",
        s.RETRY_MAX_SECONDS < s.RETRY_BASE_SECONDS,
        "RETRY_MAX_SECONDS",
        f"expected at least RETRY_BASE_SECONDS ({s.RETRY_BASE_SECONDS:g})",
    )
    rule(
        "RECONCILE_INTERVAL STRIPE_API_KEY",
        s.RECONCILE_INTERVAL > 0 and not s.STRIPE_API_KEY,
        "RECONCILE_INTERVAL",
        "expected 0 (never) while STRIPE_API_KEY is not set: reconcile reads Stripe's "
        "Events API with it",
    )
    rule(
        "CHECKOUT_LINE_ITEMS STRIPE_API_KEY",
        s.CHECKOUT_LINE_ITEMS and not s.STRIPE_API_KEY,
        "CHECKOUT_LINE_ITEMS",
        "expected false while STRIPE_API_KEY is not set: line items are read from Stripe's "
        "API with it",
    )
    rule(
        "INVOICE_LINES STRIPE_API_KEY",
        s.INVOICE_LINES and not s.STRIPE_API_KEY,
        "INVOICE_LINES",
        "expected false while STRIPE_API_KEY is not set: an invoice's lines are read from "
        "Stripe's API with it",
    )
    secrets, labels = s.STRIPE_WEBHOOK_SECRET, s.STRIPE_WEBHOOK_SECRET_LABELS
    shared = sorted({label for label in s.secret_labels if s.secret_labels.count(label) > 1})
    names = "STRIPE_WEBHOOK_SECRET STRIPE_WEBHOOK_SECRET_LABELS"
    rule(
        names,
        bool(secrets) and len(labels) > len(secrets),
        "STRIPE_WEBHOOK_SECRET_LABELS",
        f"{len(labels)} labels for {len(secrets)} secrets; expected at most one label per "
        "secret, in the same order",
    )
    twice = len(set(secrets)) < len(secrets)
    rule(
        names,
        bool(shared) and twice,
        "STRIPE_WEBHOOK_SECRET",
        "the same secret given twice; expected each secret once",
    )
    rule(
        names,
        bool(shared) and not twice,
        "STRIPE_WEBHOOK_SECRET_LABELS",
        f"two secrets share the label {', '.join(shared)}; expected a unique label per secret",
    )
    tokens, given = s.OPS_TOKEN, s.OPS_TOKEN_LABELS
    names = "OPS_TOKEN OPS_TOKEN_LABELS"
    miscounted = bool(tokens and given) and len(given) != len(tokens)
    rule(
        names,
        miscounted,
        "OPS_TOKEN_LABELS",
        f"{len(given)} labels for {len(tokens)} tokens; expected one label per OPS_TOKEN "
        "token, in the same order",
    )
    twice = not miscounted and len(set(tokens)) < len(tokens)
    rule(names, twice, "OPS_TOKEN", "the same token given twice; expected each token once")
    shared = sorted({x for x in given if given.count(x) > 1})
    rule(
        names,
        bool(shared) and not miscounted and not twice,
        "OPS_TOKEN_LABELS",
        f"two tokens share the label {', '.join(shared)}; expected a unique label per token",
    )
    return found


def load(
    environ: Mapping[str, str] | None = None, require: Iterable[str] = (), **overrides: object
) -> Settings:
    """Settings from defaults, then the environment, then explicit overrides (tests: values
    or texts), each checked, then the rules between them; raises SettingsError with every
    problem found, first each variable whose name is a slip of a setting's (a misspelt
    FULFILMENT_SQL would leave the effect unset without a word)."""
    env = os.environ if environ is None else environ
    given = {f.name: env[f.name] for f in fields(Settings) if f.name in env}
    unknown = set(overrides) - {f.name for f in fields(Settings)}
    if unknown:
        raise TypeError(f"not settings: {sorted(unknown)}")
    for name, value in overrides.items():
        kind = kind_of(field_named(Settings, name))
        given[name] = value if isinstance(value, str) else kind.spell(value)
    problems = misspelt(env, KNOWN)
    try:
        found = setting_fields.load(Settings, given, require, rule_problems)
    except SettingsError as exc:
        problems += exc.problems
    if problems:
        raise SettingsError(problems)
    return found


def load_or_exit(environ: Mapping[str, str] | None = None, require: Iterable[str] = ()) -> Settings:
    """:func:`load`, or refuse to start with one line per problem (process entry points)."""
    settings: Settings = or_exit(lambda: load(environ, require))[0]
    return settings


def effect_line(s: Settings, reversal: bool = False) -> str | None:
    """What a built-in SQLite or PostgreSQL downstream runs beside the key it records:
    FULFILMENT_SQL or FULFILMENT_EFFECT (``reversal``: the REVERSAL_ ones), or that nothing
    does, as the banner, the worker's start-up line and the dashboard say it. None for an
    action of another kind, or no REVERSAL_ACTION."""
    prefix = "REVERSAL" if reversal else "FULFILMENT"
    action = s.REVERSAL_ACTION if reversal else s.FULFILMENT_ACTION
    if action is None or action.scheme not in ("sqlite", "postgresql"):
        return None
    sql, function = getattr(s, f"{prefix}_SQL"), getattr(s, f"{prefix}_EFFECT")
    if sql:  # a statement itself may be long: its file, or only its setting
        return f"effect: {prefix}_SQL" + (f"={sql}" if sql.startswith("@") else " (a statement)")
    if function:
        return f"effect: {prefix}_EFFECT={function}"
    recorded = (
        "only the key is recorded"
        if action.scheme == "postgresql"
        else "only the built-in orders table is written"
    )
    return f"effect: none — {recorded} ({prefix}_SQL or {prefix}_EFFECT adds yours)"


ACTIONS = ("FULFILMENT_ACTION", "REVERSAL_ACTION")


def effect_lines(s: Settings) -> list[tuple[str, str]]:
    """:func:`effect_line` of FULFILMENT_ACTION and REVERSAL_ACTION, by setting, for those
    that are built-in databases."""
    found = [(name, effect_line(s, name == "REVERSAL_ACTION")) for name in ACTIONS]
    return [(name, line) for name, line in found if line]


def given_secrets(env: Mapping[str, str]) -> tuple[list[str], list[str]] | None:
    """STRIPE_WEBHOOK_SECRET and its labels in ``env`` as the settings read them, to add one
    (scripts/run.sh); None when either is wrong, for the start-up check to name."""
    names = ("STRIPE_WEBHOOK_SECRET", "STRIPE_WEBHOOK_SECRET_LABELS")
    values, problems = read([field_named(Settings, name) for name in names], env)
    secrets, labels = (cast(tuple[str, ...], values.get(name, ())) for name in names)
    return None if problems else ([*secrets], [*labels])
