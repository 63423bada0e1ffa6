"""Whose payment probes an open breaker: after a probe failed on one customer's payment,
another customer's probes first (if one comes within a cool-down), so an outage of every
customer is not closed on by two probes of one customer in a row (a per-customer quota
says nothing new the second time: breaker.lua closes on it), which released every waiting
payment into the outage, their attempts spent. The real scripts on a real redis-server;
the cool-downs are passed by moving the breaker's ``open_until`` back."""

import random

from redis import Redis

from ledger import keys
from ledger.attempts import Attempts
from ledger.gate import Gate, Health
from tests.integration.test_lua_breaker import ledger_of, paid

DOWN = Health("down")


def refused(attempts: Attempts, gate: Gate, pk: str, job: str) -> str:
    """One attempt of ``pk`` admitted and refused by the downstream (a 503); the breaker's
    state after it. The payment is due again at once."""
    admission = gate.admit(pk, job)
    assert admission.verdict == "go", admission
    start = attempts.start(pk, job, replay_safe=True)
    state = gate.report(pk, start.token, DOWN, "http 503")
    attempts.finish(pk, start.token, "retry", "http 503", 1.0)
    attempts.redis.hset(keys.payment(pk), "next_at", 0)
    return state


def cool_down(redis: Redis, by_ms: int) -> None:
    """The breaker's cool-down ended ``by_ms`` ago."""
    seconds, micros = redis.time()
    redis.hset(keys.BREAKER, "open_until", seconds * 1000 + micros // 1000 - by_ms)


def test_after_a_customers_failed_probe_another_customers_payment_probes(
    redis: Redis, redis_server, rng: random.Random
) -> None:
    """The outside review's case: customers X and Y refused (open); X's payment probes and
    is refused; X's other payment was the next probe, uncorroborated since that probe, and
    closed the breaker though every customer was refused. It waits a cool-down now: Y's
    payment probes, is refused, and the breaker stays open."""
    attempts, gate = ledger_of(redis_server, BREAKER_THRESHOLD="2", MAX_ATTEMPTS="9")
    x1, x2, y1 = (paid(attempts, rng) for _ in range(3))
    for pk, customer in ((x1, "cus_X"), (x2, "cus_X"), (y1, "cus_Y")):
        redis.hset(keys.payment(pk), "p_customer", customer)
    assert refused(attempts, gate, x1, "j1") == "closed"
    assert refused(attempts, gate, y1, "j2") == "open"  # two customers: the downstream
    cooldown_ms = int(attempts.settings.BREAKER_COOLDOWN_SECONDS * 1000)
    cool_down(redis, 1)
    assert refused(attempts, gate, x2, "j3") == "open"  # the probe, corroborated by Y
    assert redis.hget(keys.BREAKER, "probe_failed_by") == b"cus:cus_X"
    cool_down(redis, 1)
    waits = gate.admit(x1, "j4")  # X again: another customer's turn first
    assert (waits.verdict, waits.probe) == ("wait", False), waits
    assert redis.hget(keys.payment(x1), "waiting") == b"breaker"
    assert refused(attempts, gate, y1, "j5") == "open"  # Y's probe, refused: still down
    assert redis.hget(keys.BREAKER, "probe_failed_by") == b"cus:cus_Y"
    assert int(redis.hget(keys.BREAKER, "probes")) == 2
    # Only X waits: after a cool-down more its payment probes, and X's refusal alone (since
    # Y's probe) is X's own word: closed, as for any customer's quota.
    redis.hset(keys.payment(x1), "next_at", 0)
    cool_down(redis, cooldown_ms + 1)
    assert refused(attempts, gate, x1, "j6") == "open"  # Y's probe since corroborates
    cool_down(redis, cooldown_ms + 1)
    redis.hset(keys.payment(x2), "next_at", 0)
    assert refused(attempts, gate, x2, "j7") == "closed"
