"""Which record the replay's checker counts effects from: the built-in SQLite downstream's
file (``--downstream-db``, else the one ``FULFILMENT_ACTION`` names where the replay runs)
only when it may be the one the workers called; else the ledger's own marks, and a note
saying why. A replay run beside a stack with another action (the example shop's
PostgreSQL, a function) would otherwise read a file the workers never wrote and report
every payment unfulfilled."""

from pathlib import Path

from redis import Redis

from ledger import keys
from ledger.downstream import downstream_name
from ledger.settings import Settings

FALLBACK = "effects counted from the ledger's marks instead"


def called_on(redis: Redis, payment_keys: list[str]) -> tuple[bool, set[str]]:
    """Whether the ledger has any of the payments, and the downstreams their replay-safe
    calls went to (the payments' ``called_on``)."""
    pipe = redis.pipeline(transaction=False)
    for pk in payment_keys:
        pipe.hmget(keys.payment(pk), "state", "called_on")
    found = pipe.execute()
    names = {name for _, raw in found if raw for name in raw.decode().split()}
    return any(state for state, _ in found), names


def downstream_record(
    settings: Settings, given: str | None, redis: Redis, payment_keys: list[str]
) -> tuple[str | None, str | None]:
    """The SQLite file to count effects from (None: the ledger's marks), and a note."""
    db = given or settings.sqlite_downstream
    known, calls = called_on(redis, payment_keys)
    if db is None or not known:  # none of them recorded (a stand-in answered): nothing to count
        return db, None
    if not Path(db).exists():
        return None, (
            f"no downstream record at {db}: {FALLBACK} (give FULFILMENT_ACTION as the "
            "workers have it, or --downstream-db)"
        )
    if calls and downstream_name(db) not in calls:
        others = ", ".join(sorted(calls))
        return None, (
            f"the workers' calls went to {others}, not to {db}: {FALLBACK} (give "
            "FULFILMENT_ACTION as the workers have it, or --downstream-db)"
        )
    return db, None
