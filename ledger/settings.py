"""Settings read from the environment, shared by the web app, the worker and the CLI.

One declaration: each field of :class:`Settings` names its default (ledger/defaults.py),
its kind (ledger/setting_kinds.py: what is allowed) and how its value is shown (secrets
masked); rules between settings are the ``@check`` functions below. Every process loads
them at start-up and refuses to start with one line per problem (:func:`load_or_exit`).
To add a setting: a default in defaults.py, a field here, a case in tests/unit/test_settings.py.
"""

import hashlib
import ipaddress
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from functools import cached_property

from ledger import defaults
from ledger import setting_kinds as kinds
from ledger.declared import SettingsError, exit_with, read, setting, shown
from ledger.events import RULES, THIN_RULES, Policy
from ledger.redact import downstream, mask_secret, redact

__all__ = [
    "Settings",
    "SettingsError",
    "exit_with",
    "fingerprint",
    "load",
    "load_or_exit",
    "validated",
]

PAYABLE = frozenset(
    [t for t, r in RULES.items() if r.role == "paid"]
    + [t for t, thin in THIN_RULES.items() if thin.role == "paid"]
)
"""The event types PAID_EVENT_TYPES may list: those the event tables can count as paid."""


@dataclass(frozen=True)
class Settings:
    REDIS_URL: str = setting(defaults.REDIS_URL, kinds.redis_url(), redact)
    REDIS_SOCKET_TIMEOUT: float = setting(
        defaults.REDIS_SOCKET_TIMEOUT, kinds.number(0, 300, "seconds", above=True)
    )
    REDIS_RETRIES: int = setting(defaults.REDIS_RETRIES, kinds.whole(0, 100))
    REDIS_MAX_CONNECTIONS: int = setting(defaults.REDIS_MAX_CONNECTIONS, kinds.whole(1, 10_000))
    REDIS_SENTINELS: str = setting(defaults.REDIS_SENTINELS, kinds.host_ports())
    REDIS_SENTINEL_MASTER: str = setting(defaults.REDIS_SENTINEL_MASTER, kinds.name())
    REDIS_SENTINEL_PASSWORD: str = setting(
        defaults.REDIS_SENTINEL_PASSWORD, kinds.token(), mask_secret
    )
    REDIS_PASSWORD: str = setting(defaults.REDIS_PASSWORD, kinds.token(), mask_secret)
    LEDGER_MIN_REPLICAS: int = setting(defaults.LEDGER_MIN_REPLICAS, kinds.whole(0, 100))
    LEDGER_WAIT_TIMEOUT: float = setting(
        defaults.LEDGER_WAIT_TIMEOUT, kinds.number(0, 300, "seconds", above=True)
    )
    STRIPE_WEBHOOK_SECRET: str = setting(
        defaults.STRIPE_WEBHOOK_SECRET, kinds.webhook_secrets(), mask_secret
    )
    STRIPE_WEBHOOK_SECRET_LABELS: str = setting(
        defaults.STRIPE_WEBHOOK_SECRET_LABELS, kinds.labels()
    )
    STRIPE_WEBHOOK_TOLERANCE: int = setting(
        defaults.STRIPE_WEBHOOK_TOLERANCE, kinds.whole(0, None, "seconds", " (0: no check)")
    )
    SECRET_RETIRE_AFTER_DAYS: int = setting(
        defaults.SECRET_RETIRE_AFTER_DAYS, kinds.whole(1, None, "days")
    )
    MAX_BODY_BYTES: int = setting(defaults.MAX_BODY_BYTES, kinds.whole(1, 64 << 20, "bytes"))
    BODY_READ_TIMEOUT: float = setting(
        defaults.BODY_READ_TIMEOUT, kinds.number(0, None, "seconds", above=True)
    )
    CONNECTIONS_PER_ADDRESS: int = setting(
        defaults.CONNECTIONS_PER_ADDRESS, kinds.whole(0, 100_000, "", " (0: no cap)")
    )
    REQUESTS_PER_CONNECTION: int = setting(
        defaults.REQUESTS_PER_CONNECTION, kinds.whole(1, 1_000_000)
    )
    CONNECTION_LIFETIME: float = setting(
        defaults.CONNECTION_LIFETIME, kinds.number(0, 86_400, "seconds", above=True)
    )
    TRUSTED_PROXIES: str = setting(defaults.TRUSTED_PROXIES, kinds.networks())
    EVENT_RETENTION_DAYS: int = setting(defaults.EVENT_RETENTION_DAYS, kinds.whole(1, None, "days"))
    PAYMENT_RETENTION_DAYS: int = setting(
        defaults.PAYMENT_RETENTION_DAYS, kinds.whole(0, None, "days", " (0: keep)")
    )
    OPS_TOKEN: str = setting(defaults.OPS_TOKEN, kinds.tokens(), mask_secret)
    OPS_TOKEN_LABELS: str = setting(defaults.OPS_TOKEN_LABELS, kinds.token_labels())
    METRICS_TOKEN: str = setting(defaults.METRICS_TOKEN, kinds.token(), mask_secret)
    QUEUE_NAME: str = setting(defaults.QUEUE_NAME, kinds.name())
    RQ_RESULT_TTL: int = setting(defaults.RQ_RESULT_TTL, kinds.whole(0, None, "seconds"))
    FULFILMENT_ACTION: str = setting(
        defaults.FULFILMENT_ACTION, kinds.fulfilment_action(), downstream
    )
    FULFILMENT_REPLAY_SAFE: bool = setting(defaults.FULFILMENT_REPLAY_SAFE, kinds.boolean())
    FULFILMENT_TIMEOUT: float = setting(
        defaults.FULFILMENT_TIMEOUT, kinds.number(0, None, "seconds", above=True)
    )
    FULFILMENT_KILL_MARGIN_SECONDS: float = setting(
        defaults.FULFILMENT_KILL_MARGIN_SECONDS, kinds.number(0, 60, "seconds", above=True)
    )
    LEASE_SECONDS: int = setting(defaults.LEASE_SECONDS, kinds.whole(1, None, "seconds"))
    MAX_ATTEMPTS: int = setting(defaults.MAX_ATTEMPTS, kinds.whole(1, 1000))
    RETRY_BASE_SECONDS: float = setting(
        defaults.RETRY_BASE_SECONDS, kinds.number(0, None, "seconds", above=True)
    )
    RETRY_MAX_SECONDS: float = setting(
        defaults.RETRY_MAX_SECONDS, kinds.number(0, None, "seconds", above=True)
    )
    BREAKER_THRESHOLD: int = setting(
        defaults.BREAKER_THRESHOLD, kinds.whole(0, 1000, note=" (0: off)")
    )
    BREAKER_COOLDOWN_SECONDS: float = setting(
        defaults.BREAKER_COOLDOWN_SECONDS, kinds.number(0, 3600, "seconds", above=True)
    )
    BREAKER_MAX_RETRY_AFTER_SECONDS: int = setting(
        defaults.BREAKER_MAX_RETRY_AFTER_SECONDS, kinds.whole(1, 86400, "seconds")
    )
    FULFILMENT_MAX_RATE: int = setting(
        defaults.FULFILMENT_MAX_RATE, kinds.whole(0, 10000, "calls per second", " (0: no limit)")
    )
    QUEUED_GRACE_SECONDS: int = setting(
        defaults.QUEUED_GRACE_SECONDS, kinds.whole(1, None, "seconds")
    )
    SWEEP_INTERVAL: float = setting(
        defaults.SWEEP_INTERVAL, kinds.number(0, None, "seconds", above=True)
    )
    PAID_EVENT_TYPES: tuple[str, ...] = setting(
        defaults.PAID_EVENT_TYPES, kinds.event_types(PAYABLE)
    )
    FULFIL_UNLINKED_INVOICES: bool = setting(defaults.FULFIL_UNLINKED_INVOICES, kinds.boolean())
    STRIPE_MODE: str = setting(defaults.STRIPE_MODE, kinds.choice("live", "test", "any"))
    FULFIL_CONNECT: bool = setting(defaults.FULFIL_CONNECT, kinds.boolean())
    STUCK_QUEUED_SECONDS: int = setting(
        defaults.STUCK_QUEUED_SECONDS, kinds.whole(1, None, "seconds")
    )
    STRIPE_API_KEY: str = setting(defaults.STRIPE_API_KEY, kinds.api_key(), mask_secret)
    STRIPE_API_BASE: str = setting(defaults.STRIPE_API_BASE, kinds.http_url(), redact)
    RECONCILE_INTERVAL: float = setting(
        defaults.RECONCILE_INTERVAL, kinds.number(0, None, "seconds", note=" (0: never)")
    )

    @cached_property  # read on every request: split once
    def secrets(self) -> list[str]:
        """The webhook secrets in the order given (tried in that order)."""
        return _split(self.STRIPE_WEBHOOK_SECRET)

    @cached_property
    def secret_labels(self) -> list[str]:
        """A label per secret (``STRIPE_WEBHOOK_SECRET_LABELS``), else its fingerprint."""
        given = _split(self.STRIPE_WEBHOOK_SECRET_LABELS)
        return [given[i] if i < len(given) else fingerprint(s) for i, s in enumerate(self.secrets)]

    @cached_property
    def ops_tokens(self) -> list[str]:
        """The ops tokens in the order given."""
        return _split(self.OPS_TOKEN)

    @cached_property
    def ops_token_labels(self) -> list[str]:
        """A label per ops token (``OPS_TOKEN_LABELS``), else ``default`` or ``tokenN``."""
        if given := _split(self.OPS_TOKEN_LABELS):
            return given
        count = len(self.ops_tokens)
        return ["default"] if count == 1 else [f"token{i}" for i in range(1, count + 1)]

    @cached_property
    def trusted_proxies(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        """``TRUSTED_PROXIES`` as networks (kinds.networks checked each)."""
        items = _split(self.TRUSTED_PROXIES)
        return tuple(ipaddress.ip_network(item, strict=False) for item in items)

    @cached_property
    def sentinels(self) -> list[tuple[str, int]]:
        """``REDIS_SENTINELS`` as (host, port) pairs; empty: connect to REDIS_URL."""
        pairs = [s.rpartition(":") for s in _split(self.REDIS_SENTINELS)]
        return [(host.strip("[]"), int(port)) for host, _, port in pairs]  # kinds.host_ports

    @cached_property
    def policy(self) -> Policy:
        """What this deployment fulfils (the event table's inputs)."""
        return Policy(
            frozenset(self.PAID_EVENT_TYPES),
            self.FULFIL_UNLINKED_INVOICES,
            self.STRIPE_MODE,
            self.FULFIL_CONNECT,
        )

    @property
    def call_window(self) -> float:
        """Seconds after its fence was sent that a call may still start: it then ends (or
        its process does, FULFILMENT_KILL_MARGIN_SECONDS after the deadline) at least that
        margin before the lease can expire."""
        return (
            self.LEASE_SECONDS - self.FULFILMENT_TIMEOUT - 2 * self.FULFILMENT_KILL_MARGIN_SECONDS
        )

    @property
    def lease_ms(self) -> int:
        return int(self.LEASE_SECONDS * 1000)

    @property
    def grace_ms(self) -> int:
        return int(self.QUEUED_GRACE_SECONDS * 1000)

    @property
    def retry_base_ms(self) -> int:
        return int(self.RETRY_BASE_SECONDS * 1000)

    @property
    def retry_cap_ms(self) -> int:
        return int(self.RETRY_MAX_SECONDS * 1000)

    @property
    def event_ttl_s(self) -> int:
        return self.EVENT_RETENTION_DAYS * 86400

    @property
    def job_timeout_s(self) -> int:
        """RQ's timeout of a fulfilment job: longer than any lease, so the ledger's lease, not
        RQ, decides when an attempt is given up (a stale one is fenced when it comes back)."""
        margin = defaults.JOB_TIMEOUT_MARGIN_SECONDS
        return math.ceil(self.LEASE_SECONDS + self.FULFILMENT_TIMEOUT + margin)

    @property
    def sqlite_downstream(self) -> str | None:
        """The file of the built-in SQLite downstream, when it is the action."""
        action = self.FULFILMENT_ACTION
        return action.removeprefix("sqlite:///") if action.startswith("sqlite:///") else None


def fingerprint(secret: str) -> str:
    """A short name that identifies ``secret`` without revealing it."""
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()[:8]


# Rules between settings: each names the settings it reads (skipped when one of them is
# itself invalid) and yields (setting, what is expected of it).
Check = Callable[[Settings], Iterator[tuple[str, str]]]
CHECKS: list[tuple[tuple[str, ...], Check]] = []


def check(*names: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        CHECKS.append((names, fn))
        return fn

    return register


@check("PAYMENT_RETENTION_DAYS", "EVENT_RETENTION_DAYS")
def _payments_outlive_events(s: Settings) -> Iterator[tuple[str, str]]:
    if 0 < s.PAYMENT_RETENTION_DAYS <= s.EVENT_RETENTION_DAYS:
        why = f"expected 0 (keep) or more than EVENT_RETENTION_DAYS ({s.EVENT_RETENTION_DAYS})"
        yield "PAYMENT_RETENTION_DAYS", why + ": a late resend must never fulfil a payment twice"


@check("LEASE_SECONDS", "FULFILMENT_TIMEOUT")
def _lease_outlasts_call(s: Settings) -> Iterator[tuple[str, str]]:
    least = s.FULFILMENT_TIMEOUT + defaults.LEASE_MARGIN_SECONDS
    if s.LEASE_SECONDS < least:
        why = f"expected at least FULFILMENT_TIMEOUT ({s.FULFILMENT_TIMEOUT:g}) + "
        why += f"{defaults.LEASE_MARGIN_SECONDS} = {least:g} seconds"
        yield "LEASE_SECONDS", why + ": a call must end before its lease does"


@check("FULFILMENT_KILL_MARGIN_SECONDS", "LEASE_SECONDS", "FULFILMENT_TIMEOUT")
def _killed_before_the_lease_ends(s: Settings) -> Iterator[tuple[str, str]]:
    margin = s.FULFILMENT_KILL_MARGIN_SECONDS
    short_lease = s.LEASE_SECONDS < s.FULFILMENT_TIMEOUT + defaults.LEASE_MARGIN_SECONDS
    if not short_lease and s.FULFILMENT_TIMEOUT + 2 * margin >= s.LEASE_SECONDS:
        why = f"expected FULFILMENT_TIMEOUT ({s.FULFILMENT_TIMEOUT:g}) + 2 x {margin:g} under "
        why += f"LEASE_SECONDS ({s.LEASE_SECONDS}): a call that will not stop ends with its "
        yield "FULFILMENT_KILL_MARGIN_SECONDS", why + "process before its lease can expire"


@check("LEDGER_MIN_REPLICAS", "LEDGER_WAIT_TIMEOUT", "REDIS_SOCKET_TIMEOUT")
def _replica_wait_ends_first(s: Settings) -> Iterator[tuple[str, str]]:
    if s.LEDGER_MIN_REPLICAS and s.LEDGER_WAIT_TIMEOUT >= s.REDIS_SOCKET_TIMEOUT:
        why = f"expected under REDIS_SOCKET_TIMEOUT ({s.REDIS_SOCKET_TIMEOUT:g}) while "
        why += "LEDGER_MIN_REPLICAS is set: a client that gives up on the WAIT first would "
        yield "LEDGER_WAIT_TIMEOUT", why + "retry the write"


@check("RETRY_BASE_SECONDS", "RETRY_MAX_SECONDS")
def _backoff_cap_above_base(s: Settings) -> Iterator[tuple[str, str]]:
    if s.RETRY_MAX_SECONDS < s.RETRY_BASE_SECONDS:
        yield (
            "RETRY_MAX_SECONDS",
            f"expected at least RETRY_BASE_SECONDS ({s.RETRY_BASE_SECONDS:g})",
        )


@check("RECONCILE_INTERVAL", "STRIPE_API_KEY")
def _reconcile_has_a_key(s: Settings) -> Iterator[tuple[str, str]]:
    if s.RECONCILE_INTERVAL > 0 and not s.STRIPE_API_KEY:
        why = "expected 0 (never) while STRIPE_API_KEY is not set"
        yield "RECONCILE_INTERVAL", why + ": reconcile reads Stripe's Events API with it"


@check("STRIPE_WEBHOOK_SECRET", "STRIPE_WEBHOOK_SECRET_LABELS")
def _one_label_per_secret(s: Settings) -> Iterator[tuple[str, str]]:
    given = _split(s.STRIPE_WEBHOOK_SECRET_LABELS)
    if s.secrets and len(given) > len(s.secrets):
        why = f"{len(given)} labels for {len(s.secrets)} secrets; expected at most one label"
        yield "STRIPE_WEBHOOK_SECRET_LABELS", why + " per secret, in the same order"
    shared = sorted({label for label in s.secret_labels if s.secret_labels.count(label) > 1})
    if shared and len(set(s.secrets)) < len(s.secrets):
        why = "the same secret given twice; expected each secret once"
        yield "STRIPE_WEBHOOK_SECRET", why
    elif shared:
        why = f"two secrets share the label {', '.join(shared)}; expected a unique label per secret"
        yield "STRIPE_WEBHOOK_SECRET_LABELS", why


@check("OPS_TOKEN", "OPS_TOKEN_LABELS")
def _one_label_per_token(s: Settings) -> Iterator[tuple[str, str]]:
    given, count = _split(s.OPS_TOKEN_LABELS), len(s.ops_tokens)
    if count and given and len(given) != count:
        why = f"{len(given)} labels for {count} tokens; expected one label per OPS_TOKEN token"
        yield "OPS_TOKEN_LABELS", why + ", in the same order"
    elif len(set(s.ops_tokens)) < count:
        yield "OPS_TOKEN", "the same token given twice; expected each token once"
    elif shared := sorted({x for x in given if given.count(x) > 1}):
        why = f"two tokens share the label {', '.join(shared)}; expected a unique label per token"
        yield "OPS_TOKEN_LABELS", why


def _split(text: str) -> list[str]:
    """A comma-separated setting's items (kinds checked there is no empty one between)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def _as_text(value: object) -> str:
    """An override as the environment would spell it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value)


def load(
    environ: Mapping[str, str] | None = None, require: Iterable[str] = (), **overrides: object
) -> Settings:
    """Settings from defaults, then the environment, then explicit overrides (tests), each
    checked; raises SettingsError with every problem found."""
    env = os.environ if environ is None else environ
    given = {f.name: env[f.name] for f in fields(Settings) if f.name in env}
    unknown = set(overrides) - {f.name for f in fields(Settings)}
    if unknown:
        raise TypeError(f"not settings: {sorted(unknown)}")
    given |= {name: _as_text(value) for name, value in overrides.items()}
    values, problems = read(fields(Settings), given, tuple(require))
    settings = Settings(**values)  # type: ignore[arg-type]
    failed = {name for name, text in given.items() if text and name not in values}
    problems += _cross_problems(settings, given, failed | set(require) - set(values))
    if problems:
        raise SettingsError(problems)
    return settings


def _cross_problems(settings: Settings, given: Mapping[str, str], failed: set[str]) -> list[str]:
    specs = {f.name: f for f in fields(Settings)}
    problems = []
    for names, rule in CHECKS:
        if failed.intersection(names):
            continue
        for name, expected in rule(settings):
            text = given.get(name) or _as_text(getattr(settings, name))
            problems.append(f"invalid setting {name}={shown(specs[name], text)}: {expected}")
    return problems


def validated(settings: Settings) -> Settings:
    """``settings`` if the rules between settings hold; raises SettingsError otherwise."""
    problems = _cross_problems(settings, {}, set())
    if problems:
        raise SettingsError(problems)
    return settings


def load_or_exit(environ: Mapping[str, str] | None = None, require: Iterable[str] = ()) -> Settings:
    """:func:`load`, or refuse to start with one line per problem (process entry points)."""
    try:
        return load(environ, require)
    except SettingsError as exc:
        exit_with(exc.problems)
