"""REVERSAL_ACTION on another downstream than FULFILMENT_ACTION (a refunds service beside
the order system), with real gunicorn, RQ workers and sweeper: that downstream down opens
its own circuit breaker, the reversals wait behind it, and new payments are fulfilled at
once, the fulfilment breaker never opened; once it answers, every reversal completes once."""

import random
from typing import Any

import requests
from redis import Redis

from ledger import keys
from ledger.stored import decode_hash
from tests.support.constants import BASIC, BEARER
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import settled_as, state_of
from tests.support.processes import wait_until
from tests.support.refunds import refund_events
from tests.system.test_outage import OUTAGE, WORKERS
from tests.system.test_reversal import paid, send_all


def breaker(redis: Redis, b: keys.Breaker) -> dict[str, str]:
    return decode_hash(redis.hgetall(b.state))


def held_back(redis: Redis, payment_key: str) -> bool:
    """Its reversal waits behind an open breaker (either: the old code had one)."""
    waiting = redis.hget(keys.payment(payment_key), "waiting")
    return waiting in (b.wait.encode() for b in keys.BREAKERS)


def refunded_while_down(
    s: Any, redis: Redis, rng: random.Random, down: CountingDownstream
) -> list[tuple[str, int]]:
    """The service started, four payments fulfilled, then ``down`` answers 503 and each
    payment is refunded in full: the payments and their amounts."""
    s.start_service(WORKERS)
    bought = [paid(s, rng) for _ in range(4)]
    wait_until(lambda: all(settled_as(redis, pk, "fulfilled") for pk, _ in bought))
    down.go_down(503)
    for pk, amount in bought:
        send_all(s, refund_events(rng, pk, amount, amount))
    return bought


def test_the_reversal_downstream_down_never_stalls_fulfilment(stack, redis, rng) -> None:
    with CountingDownstream() as fulfil, CountingDownstream() as refunds:
        s = stack(FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=refunds.url, **OUTAGE)
        bought = refunded_while_down(s, redis, rng, refunds)
        wait_until(lambda: any(held_back(redis, pk) for pk, _ in bought), 60, what="held")

        fresh = [paid(s, rng) for _ in range(10)]
        wait_until(lambda: all(settled_as(redis, pk, "fulfilled") for pk, _ in fresh), 60)
        assert s.web is not None
        scraped = requests.get(f"{s.web.url}/metrics", headers=BEARER, timeout=10).text
        gate = requests.get(f"{s.web.url}/ops/api/fulfilment", headers=BEARER, timeout=10).json()
        page = requests.get(f"{s.web.url}/ops/", headers=BASIC, timeout=10).text
        assert breaker(redis, keys.FULFILMENT_BREAKER).get("opens", "0") == "0"
        assert redis.hget(keys.STATS, "deferred:breaker") is None  # no call held by it
        assert {fulfil.successes[pk] for pk, _ in fresh} == {1}
        assert int(breaker(redis, keys.REVERSAL_BREAKER).get("opens", 0)) >= 1
        assert not any(state_of(redis, pk) == "reversed" for pk, _ in bought)
        assert 'webhook_downstream_breaker_open{action="reversal"} 1.0' in scraped
        assert 'webhook_downstream_breaker_open{action="fulfilment"} 0.0' in scraped
        assert "reversal circuit breaker" in page and 'id="gate-breaker-reversal"' in page
        assert (gate["breaker"]["state"], gate["reversal_breaker"]["opens"] >= 1) == (
            "closed",
            True,
        )

        refunds.come_back()
        wait_until(lambda: all(settled_as(redis, pk, "reversed") for pk, _ in bought), 60)
    assert {refunds.successes[pk] for pk, _ in bought} == {1}
    assert {fulfil.successes[pk] for pk, _ in bought} == {1}
    assert breaker(redis, keys.REVERSAL_BREAKER)["state"] == "closed"
    assert all(redis.zcard(keys.waiting(r)) == 0 for r in keys.WAIT_REASONS)


def test_one_downstream_for_both_is_one_breaker(stack, redis, rng: random.Random) -> None:
    """REVERSAL_ACTION the same URL as FULFILMENT_ACTION: one downstream, one outage, one
    breaker; no second one is kept or shown."""
    with CountingDownstream() as shop:
        s = stack(FULFILMENT_ACTION=shop.url, REVERSAL_ACTION=shop.url, **OUTAGE)
        bought = refunded_while_down(s, redis, rng, shop)
        wait_until(lambda: breaker(redis, keys.FULFILMENT_BREAKER).get("state") == "open", 60)
        assert s.web is not None
        gate = requests.get(f"{s.web.url}/ops/api/fulfilment", headers=BEARER, timeout=10).json()
        page = requests.get(f"{s.web.url}/ops/", headers=BASIC, timeout=10).text
        assert gate["reversal_breaker"] is None and gate["breaker"]["opens"] >= 1
        assert "reversal circuit breaker" not in page and 'id="gate-breaker"' in page
        shop.come_back()
        wait_until(lambda: all(settled_as(redis, pk, "reversed") for pk, _ in bought), 60)
    assert not redis.exists(keys.REVERSAL_BREAKER.state)
