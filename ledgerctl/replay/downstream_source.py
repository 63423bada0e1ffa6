"""Which record the replay's checker counts effects from: the built-in SQLite downstream's
file (``--downstream-db``, else the one ``FULFILMENT_ACTION`` names where the replay runs)
only when the workers' calls went to it; else the ledger's own marks, and a note saying
why. A replay run beside a stack with another action (the example shop's PostgreSQL, a
function) would otherwise read a file the workers never wrote and report every payment
unfulfilled. A file given with ``--downstream-db`` is read all the same, with the note."""

from pathlib import Path

from redis import Redis

from ledger import keys
from ledger.downstream import downstream_name
from ledger.setting_fields import exit_with
from ledger.settings import Settings
from ledgerctl.prove_probe import NoProbe, Probe, database_of, probe_for

FALLBACK = "effects counted from the ledger's marks instead"
ADVICE = "give FULFILMENT_ACTION as the workers have it, or --downstream-db"


def called_on(redis: Redis, payment_keys: list[str]) -> tuple[bool, set[str]]:
    """Whether any of the payments had an attempt, and the downstreams their calls went to
    (``called_on``: the SQLite action, replay-safe, records its file there for each call
    that its answer did not refuse)."""
    pipe = redis.pipeline(transaction=False)
    for pk in payment_keys:
        pipe.hmget(keys.payment(pk), "token", "called_on")
    found = pipe.execute()
    names = {name for _, raw in found if raw for name in raw.decode().split()}
    return any(int(token or 0) > 0 for token, _ in found), names


def downstream_record(
    settings: Settings, given: str | None, redis: Redis, payment_keys: list[str]
) -> tuple[str | None, str | None]:
    """The SQLite file to count effects from (None: the ledger's marks), and a note."""
    db = given or settings.sqlite_downstream
    attempted, calls = called_on(redis, payment_keys)
    if db is None or not attempted:  # nothing was called (or a stand-in answered)
        return db, None
    if not Path(db).exists():
        why = f"no downstream record at {db}"
    elif downstream_name(db) not in calls:
        others = ", ".join(sorted(calls)) or "a downstream that records none (not SQLite)"
        why = f"the workers' calls went to {others}, not to {db}"
    else:
        return db, None
    if given:
        return db, f"{why}: read all the same (--downstream-db)"
    return None, f"{why}: {FALLBACK} ({ADVICE})"


def effects_probe(settings: Settings, sql: str | None, db: str | None) -> Probe | None:
    """With ``--effects-sql``: the count of a payment's effects in the merchant's own tables,
    as prove-action's ``--effects-sql`` counts them (else None: the record above). A query
    with no database to run on exits 2 with one line, before anything is sent."""
    if not sql:
        return None
    if not (db or database_of(settings.FULFILMENT_ACTION)):
        scheme = settings.FULFILMENT_ACTION.scheme
        exit_with([f"--effects-sql: FULFILMENT_ACTION is a {scheme} action: give --effects-db"])
    try:
        return probe_for(settings, None, sql, db)
    except NoProbe as exc:
        exit_with([f"--effects-sql: {exc}"])
