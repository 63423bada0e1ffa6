"""The sweeper: re-enqueues payments whose job was lost, whose retry is due, or whose
lease expired, and surfaces interrupted ones. Independent of RQ's own abandoned-job
detection. Any number may run at once: each step is one atomic script per payment.
With RECONCILE_INTERVAL it also reconciles with Stripe's Events API (one sweeper per interval).
"""

import logging
import threading
import time
from collections import Counter
from typing import NoReturn

from redis import Redis
from redis.exceptions import RedisError

from ledger import keys, reconcile
from ledger.attempts import Attempts
from ledger.clock import now_ms
from ledger.deliveries import Ledger, LedgerUnavailable
from ledger.faults import fault
from ledger.gate import Gate
from ledger.redact import redact
from ledger.stored import text

log = logging.getLogger("webhook.sweeper")
BATCH = 500


def due_payments(redis: Redis, limit: int = BATCH) -> list[str]:
    due = redis.zrangebyscore(keys.DUE, "-inf", now_ms(redis), start=0, num=limit)
    return [text(k) for k in due]


def sweep_once(attempts: Attempts) -> Counter[str]:
    """One pass over the payments that are due; returns what was done, by verdict. First
    the payments that waited for a resume or for the breaker to close become due."""
    done: Counter[str] = Counter()
    released = Gate(attempts.redis, attempts.settings).release()
    if released:
        done["released"] = released
    for index, payment_key in enumerate(due_payments(attempts.redis)):
        if index == 1:
            fault("sweeper_mid_scan")
        done[attempts.recover(payment_key)] += 1
    purged = attempts.purge()
    if purged:
        done["purged"] = purged
    mark_sweep(attempts.redis)
    return done


def mark_sweep(redis: Redis) -> None:
    """Count a completed pass, so people and tests can see the sweeper make progress."""
    now = now_ms(redis)
    with redis.pipeline() as pipe:
        pipe.hincrby(keys.SWEEPER, "sweeps", 1)
        pipe.hset(keys.SWEEPER, "last_ms", now)
        pipe.execute()


def mark_schedule(attempts: Attempts) -> None:
    """Say how often this looping sweeper runs reconcile (0: never), so that an alert knows
    when a run is late (ledger/health.py)."""
    interval_ms = int(attempts.settings.RECONCILE_INTERVAL * 1000)
    attempts.redis.hset(keys.SWEEPER, "reconcile_ms", interval_ms)


def run_forever(attempts: Attempts, interval: float) -> NoReturn:
    """Sweep every ``interval`` seconds until killed; Redis outages are waited out."""
    scheduled = Reconciling(attempts) if attempts.settings.RECONCILE_INTERVAL > 0 else None
    while True:
        try:
            done = sweep_once(attempts)
            mark_schedule(attempts)
            if done:
                log.info("sweep %s", dict(done))
            if scheduled:
                scheduled.start_if_due()
        except RedisError as exc:
            log.warning("sweep skipped: %s", redact(str(exc)))
        time.sleep(interval)


class Reconciling:
    """The sweeper's reconcile runs (applied), each in a thread so that sweeping goes on."""

    def __init__(self, attempts: Attempts) -> None:
        self.ledger = Ledger(attempts.redis, attempts.settings)
        self.thread: threading.Thread | None = None

    def start_if_due(self) -> None:
        s = self.ledger.settings
        if self.thread and self.thread.is_alive():
            return
        if reconcile.claim(self.ledger.redis, s.RECONCILE_INTERVAL):
            self.thread = threading.Thread(target=self.run, name="reconcile", daemon=True)
            self.thread.start()

    def run(self) -> None:
        window = reconcile.window_s(self.ledger.settings.EVENT_RETENTION_DAYS)
        try:
            done = reconcile.reconcile(self.ledger, window, apply=True, trigger="sweeper")
        except (RedisError, LedgerUnavailable) as exc:
            log.warning("reconcile skipped: %s", redact(str(exc)))
            return
        found = {"listed": done.listed, "missing": len(done.missing), "recorded": done.recorded}
        log.info("reconcile %s%s", found, f" error: {done.error}" if done.error else "")
