"""Recording how an attempt ended (workers/jobs.py), with one log line naming the payment:
after its call, tried again while Redis cannot take the write (unreachable, failing over,
refusing writes for want of replicas or disk) until shortly before the lease ends; or
without a call (a wrong setting, a held reversal, a stall past the call's window)."""

import logging
import time
from typing import Any

from redis.exceptions import RedisError

from ledger.attempts import Attempts
from ledger.read.timeline import LEG_NAMES, Leg
from ledger.redact import redact
from ledger.replication import NotReplicated, cannot_write_now

log = logging.getLogger("workers.jobs")
LOGGED = 200
"""The most of an attempt's error its log line carries (the payment shows it all)."""
FINISH_PAUSE_S = 0.5
"""Between tries to record an outcome while Redis cannot take it."""


def finish_while_leased(
    attempts: Attempts,
    payment_key: str,
    token: int,
    ended: tuple[str, str, float, bool],
    until: float,
) -> tuple[str, str]:
    """Record how the attempt ended (``ended``: Attempts.finish's outcome, detail, call_ms and
    refused), trying again while Redis cannot take the write
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


def said(
    pk: str,
    leg: Leg,
    token: int,
    verdict: str,
    state: str,
    outcome: str,
    detail: str,
    ms: float | None,
) -> None:
    """One line per attempt that ended, naming the payment: the worker's log tells an
    incident's story as the dashboard does (``detail`` is what the payment shows: safe).
    ``ms``: how long the call took (None: no call was made). The backoff before a retry is
    the ledger's (finish_attempt.lua, which answers no time): the line says one follows."""
    took = "no call" if ms is None else f"call took {ms:.0f} ms"
    line = f"{pk} {LEG_NAMES[leg]} token {token}: {outcome}; {took}; payment {state}"
    if verdict != outcome:  # stale, already: not this attempt's word
        line += f" (recorded: {verdict})"
    elif state == "retrying":
        line += " (the next attempt after its backoff)"
    if outcome == "fulfilled":
        log.info(line)
    else:
        # Its first line, cut short: a database's DETAIL lines may quote a row's values.
        first = redact(detail).partition("\n")[0]
        log.warning("%s: %s", line, first if len(first) <= LOGGED else first[:LOGGED] + "…")


def not_called(
    attempts: Attempts, payment_key: str, token: int, stalled_s: float, leg_until: tuple[Leg, float]
) -> dict[str, Any]:
    """The worker stalled between its fence and its call past the call's window (its lease
    may be gone, a person may act): it must not call now. Its word that it did not call
    lifts an interruption its own lease expiry caused."""
    detail = f"not called: stalled {stalled_s:.1f} s after the fence"
    return without_call(attempts, payment_key, token, detail, leg_until)


def unconfirmed(
    attempts: Attempts,
    payment_key: str,
    token: int,
    exc: NotReplicated,
    leg_until: tuple[Leg, float],
) -> dict[str, Any]:
    """The fence reached the primary but not LEDGER_MIN_REPLICAS replicas: a replica promoted
    now would not know this token, so the worker does not call, and says so (retried)."""
    return without_call(attempts, payment_key, token, f"not called: {exc}", leg_until)


def without_call(
    attempts: Attempts, payment_key: str, token: int, detail: str, leg_until: tuple[Leg, float]
) -> dict[str, Any]:
    """Record ``not_called`` for a fenced attempt of ``leg`` (until its lease's ``until``)."""
    leg, until = leg_until
    ended = ("not_called", detail, 0.0, False)
    verdict, state = finish_while_leased(attempts, payment_key, token, ended, until)
    said(payment_key, leg, token, verdict, state, "not_called", detail, None)
    return {"payment": payment_key, "verdict": verdict, "state": state, "token": token}


def failed_without_call(
    attempts: Attempts,
    payment_key: str,
    job_id: str,
    detail: str,
    leg: Leg = "fulfil",
    outcome: str = "failed",
) -> dict[str, Any]:
    """A setting is wrong (FULFILMENT_ACTION cannot be built, Stripe's API refuses
    STRIPE_API_KEY): fail the payment with ``detail``, without a call, so it waits for a
    person (retry once the setting is fixed) instead of sitting queued. ``outcome`` held:
    a reversal held for a person (workers/reversal_target.py)."""
    start = attempts.start_without_call(payment_key, job_id, leg)
    if start.verdict != "go":
        return {"payment": payment_key, "verdict": start.verdict, "reason": start.reason}
    verdict, state = attempts.finish(payment_key, start.token, outcome, detail, 0.0)
    said(payment_key, leg, start.token, verdict, state, outcome, detail, None)
    return {"payment": payment_key, "verdict": verdict, "state": state, "token": start.token}
