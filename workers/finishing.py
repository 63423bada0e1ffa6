"""Recording how an attempt ended (workers/jobs.py) while Redis cannot take the write
(unreachable, failing over, refusing writes for want of replicas or disk): the write is
tried again until shortly before the attempt's lease ends."""

import logging
import time

from redis.exceptions import RedisError

from ledger.attempts import Attempts
from ledger.redact import redact
from ledger.replication import cannot_write_now

log = logging.getLogger("workers.jobs")
FINISH_PAUSE_S = 0.5
"""Between tries to record an outcome while Redis cannot take it."""


def finish_while_leased(
    attempts: Attempts, payment_key: str, token: int, ended: tuple[str, str, float], until: float
) -> tuple[str, str]:
    """Record how the attempt ended, trying again while Redis cannot take the write
    (:func:`cannot_write_now`: restarted, frozen, failing over, NOREPLICAS, MISCONF, too few
    replicas confirming) until ``until`` (time.monotonic(), short of the lease's end): given
    up after one try, a call that applied was left to the lease's expiry, ``interrupted``
    when not replay-safe. No try starts that could end past ``until``; each is the same
    write (``finish`` answers ``already`` to a second one, and waits for replicas again)."""
    s = attempts.settings
    one_try = (s.REDIS_RETRIES + 1) * s.REDIS_SOCKET_TIMEOUT + s.LEDGER_WAIT_TIMEOUT
    while True:
        try:
            return attempts.finish(payment_key, token, *ended)
        except RedisError as exc:
            if not cannot_write_now(exc) or time.monotonic() + FINISH_PAUSE_S + one_try >= until:
                raise
            log.warning(
                "%s token %s: outcome not recorded yet (%s), trying again",
                payment_key,
                token,
                redact(str(exc)),
            )
            time.sleep(FINISH_PAUSE_S)
