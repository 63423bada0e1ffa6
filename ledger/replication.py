"""Ledger writes that count only once LEDGER_MIN_REPLICAS replicas have them (Redis
``WAIT``), so that a replica promoted after the primary's machine died has every delivery
that was acknowledged and every fencing token a worker acted on (docs/DEPLOYMENT.md)."""

from collections.abc import Mapping, Sequence
from typing import Any

from redis.exceptions import (
    ConnectionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    TimeoutError,
)

from ledger.scripts import Script
from ledger.settings import Settings


class NotReplicated(RedisError):
    """The write is on the primary but fewer than LEDGER_MIN_REPLICAS replicas confirmed
    it in time: it may stand (a retry then counts as a duplicate) or go with the primary."""


REFUSED_WRITES = ("MISCONF ", "NOREPLICAS ")
"""Redis's refusals that redis-py raises as a plain ResponseError: it cannot persist the
write (its last RDB save or AOF write failed: a full disk), or fewer replicas than its
``min-replicas-to-write`` are connected (config/replication.conf)."""


def cannot_write_now(exc: BaseException) -> bool:
    """Redis cannot take or confirm a write now and may soon: unreachable or timed out, a
    replica or out of memory, one of :data:`REFUSED_WRITES`, or :class:`NotReplicated`.
    Any other error is a bug, not a wait."""
    if isinstance(exc, ConnectionError | TimeoutError | ReadOnlyError | OutOfMemoryError):
        return True
    if isinstance(exc, NotReplicated):
        return True
    return isinstance(exc, ResponseError) and str(exc).startswith(REFUSED_WRITES)


def replicated(
    script: Script,
    keys: Mapping[str, str],
    args: Mapping[str, object],
    settings: Settings,
    extra: Sequence[Any] = (),
) -> Any:
    """``script``'s reply (as :meth:`Script.read` gives it), once LEDGER_MIN_REPLICAS
    replicas have its write.

    WAIT is documented to wait for the writes of its own connection, so it runs on the
    script's connection: both go in one pipeline (sent again with the script loaded if this
    primary lacks it, e.g. after a failover: :meth:`Script.execute`).
    """
    wanted = settings.LEDGER_MIN_REPLICAS
    if not wanted:
        return script(keys, args, extra)
    key_list, arg_list = script.positional(keys, args)

    def queue(pipe: Any) -> None:
        script.run(key_list, [*arg_list, *extra], client=pipe)
        pipe.wait(wanted, int(settings.LEDGER_WAIT_TIMEOUT * 1000))

    reply, confirmed = script.execute(queue)
    if confirmed < wanted:
        raise NotReplicated(
            f"written on the primary, confirmed by {confirmed} of {wanted} replicas within "
            f"{settings.LEDGER_WAIT_TIMEOUT:g} s"
        )
    return script.read(reply)


def online_replicas(info: Mapping[str, Any]) -> int:
    """The replicas ``INFO replication`` lists as online (Redis names them slave0, slave1...)."""
    return sum(
        1
        for name, value in info.items()
        if name.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    )
