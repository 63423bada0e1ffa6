"""The circuit breaker's scripts called twice with the same arguments, as the client's retry
policy (ledger/connection.py, OutermostRetry) sends a command again whose reply was lost:
the second run answers as the first and changes nothing. And the gate's answer to a job out
of time for its attempt, before its admission or once an admission came back too late."""

import math
import random
import time
from typing import Any

from redis import Redis

from ledger import keys, settings
from ledger.attempts import Attempts
from ledger.deliveries import Delivery, Ledger, new_request_id
from ledger.events import classify
from ledger.gate import Admission, Gate, Health
from tests.support.constants import BEARER
from tests.support.helpers import paid_event
from tests.support.processes import wait_until
from workers.gating import admit


def ledger_of(redis_server, **env: str) -> tuple[Attempts, Gate]:
    s = settings.load(
        {}, REDIS_URL=redis_server.url, STRIPE_WEBHOOK_SECRET="whsec_x", STRIPE_MODE="test", **env
    )
    client = Redis.from_url(s.REDIS_URL)
    return Attempts(client, s), Gate(client, s)


def paid(attempts: Attempts, rng: random.Random) -> str:
    """A paid payment, queued; its key."""
    event, body = paid_event(rng)
    c = classify(event, attempts.settings.policy)
    delivery = Delivery(event, body, c, 0, "stripe", new_request_id())
    Ledger(attempts.redis, attempts.settings).record_delivery(delivery)
    return str(c.payment_key)


def second_attempt(redis: Redis, attempts: Attempts, pk: str) -> int:
    """Attempt 2 of ``pk`` under its lease, attempt 1 having ended as a retry."""
    first = attempts.start(pk, "job-1", replay_safe=True)
    attempts.finish(pk, first.token, "retry", "http 500", 1.0)
    redis.hset(keys.payment(pk), "next_at", 0)  # due now: not the backoff's point here
    assert attempts.recover(pk) == "requeued"
    second = attempts.start(pk, "job-2", replay_safe=True)
    assert (second.verdict, second.token) == ("go", 2)
    return second.token


def counted(redis: Redis, pk: str) -> tuple[dict, dict, dict]:
    """The payment's hash, the breaker's (but when it last heard of a failure) and the
    ledger's counters."""
    breaker = redis.hgetall(keys.BREAKER)
    breaker.pop(b"last_failure_at", None)
    return redis.hgetall(keys.payment(pk)), breaker, redis.hgetall(keys.STATS)


def test_a_report_sent_again_refunds_its_attempt_once(redis: Redis, redis_server, rng) -> None:
    """Two attempts counted, the second's request never left: refunded (budget_base + 1),
    once however often the report comes."""
    attempts, gate = ledger_of(redis_server)
    pk = paid(attempts, rng)
    token = second_attempt(redis, attempts, pk)
    unsent = Health("down", sent=False)
    first = gate.report(pk, token, unsent, "http: ConnectionError")
    after_one = counted(redis, pk)
    payment, _, stats = after_one
    assert (payment[b"budget_base"], payment[b"refunds"], stats[b"attempts_refunded"]) == (
        b"1",
        b"1",
        b"1",
    )
    assert gate.report(pk, token, unsent, "http: ConnectionError") == first
    assert counted(redis, pk) == after_one


def cooled_breaker(redis: Redis, redis_server, rng: random.Random) -> tuple[Attempts, Gate]:
    """The breaker opened by a request that never left, its cool-down over: the next
    payment admitted is its probe."""
    attempts, gate = ledger_of(redis_server, BREAKER_THRESHOLD="1", BREAKER_COOLDOWN_SECONDS="0.05")
    other = paid(attempts, rng)
    start = attempts.start(other, "job-0", replay_safe=True)
    assert gate.report(other, start.token, Health("down", sent=False), "refused") == "open"
    opened = int(redis.hget(keys.BREAKER, "open_until") or 0)

    def cooled() -> bool:
        seconds, micros = redis.time()
        return seconds * 1000 + micros // 1000 > opened

    wait_until(cooled, what="the cool-down over")
    return attempts, gate


def test_a_probe_admission_sent_again_is_the_same_probe(redis: Redis, redis_server, rng) -> None:
    """The breaker open, its cool-down over: the payment admitted is the probe. The same
    admission again finds its own grant and answers as the first, not deferred behind it."""
    attempts, gate = cooled_breaker(redis, redis_server, rng)
    pk = paid(attempts, rng)
    first = gate.admit(pk, "job-1")
    assert (first.verdict, first.probe) == ("go", True)
    after_one = counted(redis, pk)
    assert gate.admit(pk, "job-1") == first
    assert counted(redis, pk) == after_one
    assert redis.hget(keys.BREAKER, "probes") == b"1"


def test_a_job_out_of_time_is_deferred_due_now_and_takes_no_probe(
    redis: Redis, redis_server, rng, client
) -> None:
    """A job whose RQ timeout no longer leaves its attempt's time (workers/gating.py): its
    payment is due again at once for a fresh job, waiting for nothing; the probe is left
    for the next admission."""
    attempts, gate = cooled_breaker(redis, redis_server, rng)
    pk = paid(attempts, rng)
    late = gate.admit(pk, "job-1", out_of_time=True)
    assert (late.verdict, late.reason) == ("wait", "job_timeout")
    payment = redis.hgetall(keys.payment(pk))
    assert payment[b"state"] == b"retrying" and b"waiting" not in payment
    assert redis.zscore(keys.DUE, pk) == late.until_ms == int(payment[b"next_at"])
    assert redis.hget(keys.BREAKER, "probes") is None
    assert redis.hget(keys.STATS, "deferred:job_timeout") == b"1"
    scraped = client.get("/metrics", headers=BEARER).get_data(as_text=True)
    assert 'webhook_fulfilment_deferred_total{reason="job_timeout"} 1.0' in scraped
    assert attempts.recover(pk) == "requeued"
    again = gate.admit(pk, "job-2")
    assert (again.verdict, again.probe) == ("go", True)


class SlowGate(Gate):
    """Its first admission's answer arrives after the job's latest start (a slow round trip,
    a stalled primary): workers/gating.py's admit must not start the attempt then."""

    answered = 0

    def admit(self, *args: Any, **kwargs: Any) -> Admission:
        admission = super().admit(*args, **kwargs)
        self.answered += 1
        if self.answered == 1:
            time.sleep(LATE_BY)
        return admission


LATE_BY = 0.2


def test_a_probe_granted_past_the_jobs_latest_start_is_given_back_and_the_payment_deferred(
    redis: Redis, redis_server, rng
) -> None:
    """The grant came back too late for the attempt's time: the probe is given back (the
    next payment's to take, not held for its window) and the payment is due again at once,
    as a job out of time before its admission is."""
    attempts, gate = cooled_breaker(redis, redis_server, rng)
    slow = SlowGate(gate.redis, gate.settings)
    pk = paid(attempts, rng)
    admission = admit(slow, pk, "job-1", math.inf, time.monotonic() + LATE_BY / 2)
    assert (admission.verdict, admission.reason) == ("wait", "job_timeout")
    assert slow.answered == 2
    assert redis.hget(keys.BREAKER, "probes") == b"1"  # granted once, then given back
    assert redis.hmget(keys.BREAKER, "probe_payment", "probe_until") == [b"", b"0"]
    payment = redis.hgetall(keys.payment(pk))
    assert (payment[b"state"], payment[b"token"]) == (b"retrying", b"0")  # no attempt started
    assert redis.zscore(keys.DUE, pk) == admission.until_ms
    other = paid(attempts, rng)
    taken = gate.admit(other, "job-2")
    assert (taken.verdict, taken.probe) == ("go", True)


def test_an_admission_past_the_jobs_latest_start_defers_the_payment(
    redis: Redis, redis_server, rng
) -> None:
    """The same with the breaker closed: no attempt started, the payment due again at once."""
    attempts, gate = ledger_of(redis_server)
    slow = SlowGate(gate.redis, gate.settings)
    pk = paid(attempts, rng)
    admission = admit(slow, pk, "job-1", math.inf, time.monotonic() + LATE_BY / 2)
    assert (admission.verdict, admission.reason) == ("wait", "job_timeout")
    assert redis.hget(keys.payment(pk), "state") == b"retrying"
    assert redis.hget(keys.STATS, "deferred:job_timeout") == b"1"
    assert attempts.recover(pk) == "requeued"
    assert attempts.start(pk, "job-2", replay_safe=True).verdict == "go"


def test_one_payment_never_sent_again_and_again_is_one_witness_and_spends_its_attempts(
    redis: Redis, redis_server, rng
) -> None:
    """One payment's requests never leave, every time (its code raises DownstreamDown(sent=
    False) of itself: a licence server down for its product), while another payment is
    answered between them: one witness however often, so the breaker (threshold 2) stays
    closed, and only its first such attempt is refunded: those after the downstream
    answered another count, so it ends failed after MAX_ATTEMPTS rather than being retried
    for ever while it opened the breaker for everyone (merchant review)."""
    attempts, gate = ledger_of(redis_server, BREAKER_THRESHOLD="2", MAX_ATTEMPTS="3")
    stuck, other = paid(attempts, rng), paid(attempts, rng)
    answered = attempts.start(other, "job-other", replay_safe=True).token
    states = []
    for n in range(1, 6):
        start = attempts.start(stuck, f"job-{n}", replay_safe=True)
        if start.verdict != "go":
            break
        for _ in range(2):  # sent again (its reply lost): it refunds nothing the first did not
            assert gate.report(stuck, start.token, Health("down", sent=False), "licence") == (
                "closed"
            )
        assert gate.report(other, answered, Health("up"), "") == "closed"  # answered between
        _, state = attempts.finish(stuck, start.token, "retry", "licence", 1.0, refused=True)
        states.append(state)
        redis.hset(keys.payment(stuck), "next_at", 0)
        attempts.recover(stuck)
    assert states == ["retrying", "retrying", "retrying", "failed"], states
    assert redis.hget(keys.payment(stuck), "budget_base") == b"1"  # the first only: an outage?
    assert redis.hget(keys.BREAKER, "opens") is None


def test_requests_that_never_leave_while_no_one_is_answered_wait_without_spending_attempts(
    redis: Redis, redis_server, rng
) -> None:
    """A real outage with one payment in flight: each attempt's request never leaves and the
    downstream answers no one between, so each is refunded: it waits, never failed."""
    attempts, gate = ledger_of(redis_server, BREAKER_THRESHOLD="2", MAX_ATTEMPTS="2")
    alone = paid(attempts, rng)
    for n in range(1, 5):
        start = attempts.start(alone, f"job-{n}", replay_safe=True)
        assert start.verdict == "go", start
        gate.report(alone, start.token, Health("down", sent=False), "ConnectionRefusedError")
        _, state = attempts.finish(alone, start.token, "retry", "refused", 1.0, refused=True)
        assert state == "retrying"
        redis.hset(keys.payment(alone), "next_at", 0)
        attempts.recover(alone)
    assert redis.hget(keys.payment(alone), "budget_base") == b"4"
