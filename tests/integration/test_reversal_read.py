"""A reversal reads what it takes back (its refund, its amount) once it holds the lease,
before its fence: a Redis error on that read leaves the payment with a call never made, not
``interrupted`` for a person (it was read after the fence, so the lease's expiry took the
fence for a call). The real job in this process, a real redis-server and an HTTP app."""

import random
from collections.abc import Callable
from typing import Any

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from ledger import keys
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import settled_as, state_of
from tests.support.inprocess import Fulfilment
from tests.support.processes import wait_until
from tests.support.refunds import refund_events
from workers import jobs


def test_a_redis_error_reading_the_reversal_leaves_no_call_for_a_person(
    fulfilment: Callable[..., Fulfilment],
    redis: Redis,
    rng: random.Random,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with CountingDownstream() as app:
        f = fulfilment(FULFILMENT_ACTION=app.url, REVERSAL_ACTION=app.url)
        paid = samples.payment_events(rng)[2]
        pk = str(paid["data"]["object"]["id"])
        amount = int(paid["data"]["object"]["amount_received"])
        f.deliver(paid)
        f.work()
        assert settled_as(redis, pk, "fulfilled") and app.calls[pk] == 1
        for event in refund_events(rng, pk, amount, amount):
            f.deliver(event)
        read = jobs.stored_fields
        reads = []

        def failing_once_leased(client: Any, payment_key: str) -> dict[str, str]:
            reads.append(payment_key)
            if len(reads) == 2:  # the job's second read: the one under its lease
                raise RedisConnectionError("connection reset by the test")
            return read(client, payment_key)

        monkeypatch.setattr(jobs, "stored_fields", failing_once_leased)
        f.work()  # the job fails on that read
        assert len(reads) == 2 and app.calls[pk] == 1
        redis.hset(keys.payment(pk), "lease_until", 0)  # its lease runs out
        assert f.attempts.recover(pk) != "interrupted"
        assert state_of(redis, pk) != "interrupted"
        assert redis.hget(keys.payment(pk), "phase") is None  # no call waits for a person

        def swept_and_worked() -> bool:  # once its backoff (RETRY_BASE_SECONDS) is over
            f.sweep()
            f.work()
            return settled_as(redis, pk, "reversed")

        wait_until(swept_and_worked, what="the reversal retried")
        assert app.calls[pk] == 2
