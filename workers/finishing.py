"""Recording how a call ended (workers/jobs.py, after the call) while Redis cannot be
reached: the write is tried again until shortly before the attempt's lease ends."""

import logging
import time

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ledger.attempts import Attempts
from ledger.redact import redact

log = logging.getLogger("workers.jobs")
FINISH_PAUSE_S = 0.5
"""Between tries to record an outcome while Redis cannot be reached."""


def finish_while_leased(
    attempts: Attempts, payment_key: str, token: int, ended: tuple[str, str, float], until: float
) -> tuple[str, str]:
    """Record how the call ended, trying again while Redis cannot be reached (restarted,
    frozen, failing over) until ``until`` (time.monotonic(), short of the lease's end):
    given up after one try's REDIS_RETRIES, a call that applied was left to the lease's
    expiry, ``interrupted`` when not replay-safe. No try starts that could end past
    ``until``; each is the same write (``finish`` answers ``already`` to a second one)."""
    s = attempts.settings
    one_try = (s.REDIS_RETRIES + 1) * s.REDIS_SOCKET_TIMEOUT  # each try may wait this long
    while True:
        try:
            return attempts.finish(payment_key, token, *ended)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            if time.monotonic() + FINISH_PAUSE_S + one_try >= until:
                raise
            log.warning(
                "%s token %s: outcome not recorded yet (%s), trying again",
                payment_key,
                token,
                redact(str(exc)),
            )
            time.sleep(FINISH_PAUSE_S)
