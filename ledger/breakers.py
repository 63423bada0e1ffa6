"""Which circuit breaker gates a call: one per downstream. FULFILMENT_ACTION's calls (the
legs fulfil, settle, refulfil) are gated and witnessed by ``keys.FULFILMENT_BREAKER``;
REVERSAL_ACTION's (the leg reverse) by that same one when it calls the same downstream (the
same outage), else by ``keys.REVERSAL_BREAKER``, so an outage of one downstream never holds
the other's calls. A downstream is named as a payment's ``called_on`` names it."""

from psycopg.conninfo import conninfo_to_dict

from ledger import keys
from ledger.downstream import downstream_name, short_digest
from ledger.setting_urls import ActionSpec
from ledger.settings import Settings


def downstream_named(scheme: str, target: str) -> str:
    """The name of the downstream an action of ``scheme`` calls at ``target`` (its SQLite
    file, its PostgreSQL or http(s) URL, its ``module:function``): hashed where the target
    may hold a secret (a capability URL's path, a password: masked first, so a new
    password is the same database)."""
    if scheme == "sqlite":
        return downstream_name(target)
    if scheme == "postgresql":
        return "postgresql:" + short_digest(postgres_identity(target))
    if scheme == "http":
        return "http:" + short_digest(target)
    return "function:" + target


def postgres_identity(url: str) -> str:
    """What tells one PostgreSQL database (and the effects table its user's search path
    finds) from another, as libpq reads the URL: host, port, database, user, options; not
    the password, nor how it connects (sslmode, timeouts, application_name)."""
    params = conninfo_to_dict(url)
    params["host"] = str(params.get("host", "")).lower()
    params.setdefault("port", "5432")
    kept = ("host", "hostaddr", "port", "dbname", "user", "options", "service")
    return " ".join(f"{k}={params[k]}" for k in kept if params.get(k) not in (None, ""))


def spec_downstream(spec: ActionSpec) -> str:
    return downstream_named(spec.scheme, spec.target)


def reversal_apart(s: Settings) -> bool:
    """Whether REVERSAL_ACTION calls another downstream than FULFILMENT_ACTION: then its
    calls have a breaker of their own."""
    reversal = s.REVERSAL_ACTION
    return reversal is not None and spec_downstream(reversal) != spec_downstream(
        s.FULFILMENT_ACTION
    )


def breaker_of(leg: str, apart: bool) -> keys.Breaker:
    """The breaker of a call of ``leg`` (workers/jobs.py), REVERSAL_ACTION being ``apart``."""
    return keys.REVERSAL_BREAKER if apart and leg == "reverse" else keys.FULFILMENT_BREAKER
