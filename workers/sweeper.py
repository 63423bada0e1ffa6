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
from rq import Queue
from rq.worker_registration import clean_worker_registry

from ledger import keys, reconcile
from ledger.attempts import UNWATCHED, Attempts
from ledger.clock import StepWatch, now_ms
from ledger.deliveries import Ledger, LedgerUnavailable
from ledger.faults import fault
from ledger.gate import Gate
from ledger.redact import redact
from ledger.stored import text

log = logging.getLogger("webhook.sweeper")
BATCH = 500


def due_payments(redis: Redis, now: int, limit: int = BATCH) -> list[str]:
    due = redis.zrangebyscore(keys.DUE, "-inf", now, start=0, num=limit)
    return [text(k) for k in due]


def clock_watch(attempts: Attempts) -> StepWatch:
    """The looping sweeper's watch on Redis's clock: it ends no lease for a lease after it
    starts, or after Redis's clock ran half a kill margin ahead of its own."""
    s = attempts.settings
    margin = s.FULFILMENT_KILL_MARGIN_SECONDS
    return StepWatch(s.LEASE_SECONDS, margin / 2, lambda: now_ms(attempts.redis))


def sweep_once(attempts: Attempts, watch: StepWatch | None = None) -> Counter[str]:
    """One pass over the payments that are due; returns what was done, by verdict. First
    the payments that waited for a resume or for their breaker to close become due. With a
    ``watch`` (the looping sweeper) an expired lease is ended only while Redis's clock has
    run no faster than this process's (ledger/clock.py); without one (a single pass, as
    ``webhook-ledger sweep`` runs) Redis's clock is taken as it is."""
    done: Counter[str] = Counter()
    released = Gate(attempts.redis, attempts.settings).release()
    if released:
        done["released"] = released
    if watch is None:
        now = now_ms(attempts.redis)
    else:
        seen = watch.steps
        now = watch.read()
        if watch.steps > seen:
            note_step(attempts.redis, watch, now)
            done["clock_stepped"] = 1
    for index, payment_key in enumerate(due_payments(attempts.redis, now)):
        if index == 1:
            fault("sweeper_mid_scan")
        trusted = watch.trusted_until_ms() if watch else UNWATCHED
        verdict = attempts.recover(payment_key, trusted_until_ms=trusted)
        if verdict == "interrupted":  # a person's now: named where the incident is read
            log.warning("%s interrupted: its lease expired during the downstream call", payment_key)
        done[verdict] += 1
    purged = attempts.purge()
    if purged:
        done["purged"] = purged
    kept = attempts.keep_rejections()
    if kept:
        done["rejections_kept"] = kept
    # The shipped worker runs no RQ maintenance: a worker that died unannounced (killed, its
    # registration left to expire) would stay in its queue's set for good, and every read of
    # the workers (each /metrics scrape, summary, dashboard) would look it up.
    clean_worker_registry(Queue(attempts.settings.QUEUE_NAME, connection=attempts.redis))
    mark_sweep(attempts.redis)
    return done


def note_step(redis: Redis, watch: StepWatch, now: int) -> None:
    """Say that Redis's clock stepped forward: in the log and in ``wl:sweeper``."""
    log.warning(
        "Redis's clock ran %d ms ahead of this sweeper's: no lease is ended for %g s "
        '(docs/DEPLOYMENT.md, "Clocks")',
        watch.last_step_ms,
        watch.hold_s,
    )
    with redis.pipeline() as pipe:
        pipe.hincrby(keys.SWEEPER, "clock_steps", 1)
        pipe.hset(keys.SWEEPER, mapping={"clock_step_at": now, "clock_step_ms": watch.last_step_ms})
        pipe.execute()


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
    watch = clock_watch(attempts)
    while True:
        try:
            done = sweep_once(attempts, watch)
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
