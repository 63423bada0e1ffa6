"""One circuit breaker per downstream (ledger/breakers.py): REVERSAL_ACTION on another
downstream than FULFILMENT_ACTION has a breaker of its own, so an outage of one holds no
call to the other, and each breaker releases only the payments it held."""

import random
from pathlib import Path

import pytest
from redis import Redis

from ledger import keys
from ledger import settings as settings_module
from ledger.breakers import breaker_of, reversal_apart
from ledger.gate import Gate, Health
from tests.integration.test_lua_breaker import ledger_of, paid
from workers.actions import build_action, build_reversal_action, downstream_of

DOWN = Health("down", sent=False)  # a refused connection: one witness opens at threshold 1


def opened(redis: Redis, gate: Gate, pk: str, breaker: keys.Breaker) -> None:
    assert gate.report(pk, 1, DOWN, "http: ConnectionError", breaker) == "open"
    assert redis.hget(breaker.state, "state") == b"open"


def waiting(redis: Redis, pk: str) -> str | None:
    reason = redis.hget(keys.payment(pk), "waiting")
    return reason.decode() if reason else None


def test_an_outage_of_the_reversal_downstream_holds_no_fulfilment(
    redis: Redis, redis_server, rng: random.Random
) -> None:
    attempts, gate = ledger_of(redis_server, BREAKER_THRESHOLD="1")
    refusing, reversal_due, order = (paid(attempts, rng) for _ in range(3))
    opened(redis, gate, refusing, keys.REVERSAL_BREAKER)
    assert not redis.exists(keys.BREAKER, keys.BREAKER_WITNESSES)
    admission = gate.admit(order, "job-f", park_rate=True, breaker=keys.FULFILMENT_BREAKER)
    assert (admission.verdict, admission.probe, admission.dirty) == ("go", False, False)
    held = gate.admit(reversal_due, "job-r", park_rate=True, breaker=keys.REVERSAL_BREAKER)
    assert (held.verdict, held.reason) == ("wait", "reversal_breaker")
    assert waiting(redis, reversal_due) == "reversal_breaker"
    assert redis.zscore(keys.waiting("reversal_breaker"), reversal_due) is not None


def test_an_outage_of_the_fulfilment_downstream_holds_no_reversal(
    redis: Redis, redis_server, rng: random.Random
) -> None:
    attempts, gate = ledger_of(redis_server, BREAKER_THRESHOLD="1")
    refusing, reversal_due, order = (paid(attempts, rng) for _ in range(3))
    opened(redis, gate, refusing, keys.FULFILMENT_BREAKER)
    assert not redis.exists(keys.REVERSAL_BREAKER.state, keys.REVERSAL_BREAKER.witnesses)
    admission = gate.admit(reversal_due, "job-r", park_rate=True, breaker=keys.REVERSAL_BREAKER)
    assert admission.verdict == "go"
    held = gate.admit(order, "job-f", park_rate=True, breaker=keys.FULFILMENT_BREAKER)
    assert (held.verdict, held.reason) == ("wait", "breaker")


def test_each_breaker_releases_only_the_payments_it_held(
    redis: Redis, redis_server, rng: random.Random
) -> None:
    """The sweeper's release: a payment held by the reversal breaker stays while that one is
    open, whatever the other does, and is released once it closes; and the other way."""
    attempts, gate = ledger_of(redis_server, BREAKER_THRESHOLD="1")
    prober, reversal_due, order = (paid(attempts, rng) for _ in range(3))
    opened(redis, gate, prober, keys.REVERSAL_BREAKER)
    opened(redis, gate, prober, keys.FULFILMENT_BREAKER)
    gate.admit(reversal_due, "job-r", park_rate=True, breaker=keys.REVERSAL_BREAKER)
    gate.admit(order, "job-f", park_rate=True, breaker=keys.FULFILMENT_BREAKER)
    assert (waiting(redis, reversal_due), waiting(redis, order)) == ("reversal_breaker", "breaker")
    assert gate.release() == 0

    assert gate.report(prober, 1, Health("up"), "", keys.FULFILMENT_BREAKER) == "closed"
    assert gate.release() == 1
    assert waiting(redis, order) is None and redis.zscore(keys.DUE, order) is not None
    assert waiting(redis, reversal_due) == "reversal_breaker"
    assert gate.release() == 0  # not released again and again by the other's state

    assert gate.report(prober, 1, Health("up"), "", keys.REVERSAL_BREAKER) == "closed"
    assert gate.release() == 1
    assert waiting(redis, reversal_due) is None
    assert redis.zcard(keys.waiting("reversal_breaker")) == 0


@pytest.mark.parametrize(
    ("fulfilment", "reversal", "apart"),
    [
        ("sqlite:///{tmp}/shop.sqlite3", "sqlite:///{tmp}/shop.sqlite3", False),
        ("sqlite:///{tmp}/shop.sqlite3", "sqlite:///{tmp}/./shop.sqlite3", False),
        ("sqlite:///{tmp}/shop.sqlite3", "sqlite:///{tmp}/refunds.sqlite3", True),
        ("http://127.0.0.1:8401/fulfil", "http://127.0.0.1:8401/fulfil", False),
        ("http://127.0.0.1:8401/fulfil", "http://127.0.0.1:8402/refund", True),
        ("sqlite:///{tmp}/shop.sqlite3", "http://127.0.0.1:8402/refund", True),
    ],
)
def test_a_reversal_has_its_own_breaker_only_on_another_downstream(
    tmp_path: Path, fulfilment: str, reversal: str, apart: bool
) -> None:
    """Apart as ``called_on`` names the two downstreams (workers.actions.downstream_of),
    which the web, without the actions, reads from the settings alone."""
    s = settings_module.load(
        {},
        FULFILMENT_ACTION=fulfilment.format(tmp=tmp_path),
        REVERSAL_ACTION=reversal.format(tmp=tmp_path),
    )
    reversal_action = build_reversal_action(s)
    assert reversal_action is not None
    assert (downstream_of(reversal_action) != downstream_of(build_action(s))) is apart
    assert reversal_apart(s) is apart
    assert breaker_of("reverse", apart) == (keys.REVERSAL_BREAKER if apart else keys.BREAKERS[0])
    assert all(breaker_of(leg, apart) == keys.FULFILMENT_BREAKER for leg in LEGS_OF_FULFILMENT)


LEGS_OF_FULFILMENT = ("fulfil", "settle", "refulfil")


def test_no_reversal_action_one_breaker() -> None:
    assert not reversal_apart(settings_module.load({}))
