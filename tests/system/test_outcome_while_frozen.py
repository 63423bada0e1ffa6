"""Redis frozen (SIGSTOP) between a call that applied and the record of its outcome: the
worker tries again until shortly before its lease ends (workers/finishing.py
``finish_while_leased``). Before, it gave up after one write's REDIS_RETRIES; on a Redis
that had not run the outcome's script yet, the write sent before the freeze came back
NOSCRIPT once it thawed, so the lease expired and a call that was not replay-safe ended
``interrupted``, waiting for a person, though it had applied once. Likewise while Redis
refuses writes for want of replicas (NOREPLICAS, its ``min-replicas-to-write``): the
outcome was dropped at the first refusal."""

import os
import signal

import pytest
from redis import Redis

from ledger.read import payments
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import payment_key_of, state_of
from tests.support.processes import RedisServer, wait_until


class Frozen:
    """SIGSTOP: the kernel still takes connections, nothing answers."""

    said = "outcome not recorded yet"
    settings = {"REDIS_SOCKET_TIMEOUT": "0.3", "REDIS_RETRIES": "1"}

    def __init__(self, own: RedisServer, redis: Redis) -> None:
        self.own = own

    def begin(self) -> None:
        os.kill(self.own.pid, signal.SIGSTOP)

    def end(self) -> None:
        os.kill(self.own.pid, signal.SIGCONT)


class NoReplicas(Frozen):
    """Its own min-replicas-to-write 1 and no replica: every write refused (NOREPLICAS)."""

    said = "NOREPLICAS"
    settings: dict[str, str] = {}

    def __init__(self, own: RedisServer, redis: Redis) -> None:
        self.redis = redis

    def begin(self) -> None:
        self.redis.config_set("min-replicas-to-write", 1)

    def end(self) -> None:
        self.redis.config_set("min-replicas-to-write", 0)


@pytest.mark.parametrize("fault", [Frozen, NoReplicas], ids=["frozen", "noreplicas"])
def test_an_outcome_redis_cannot_take_is_recorded_once_it_can(
    stack, rng, tmp_path, fault: type[Frozen]
) -> None:
    own = RedisServer(tmp_path / "redis").start()  # its own: not the shared one
    redis = own.client()
    trouble = fault(own, redis)
    try:
        with CountingDownstream() as downstream:
            gate = downstream.hold_first_call()
            s = stack(
                REDIS_URL=own.url,
                FULFILMENT_ACTION=downstream.url,
                FULFILMENT_REPLAY_SAFE="false",
                FULFILMENT_TIMEOUT="3",
                LEASE_SECONDS="20",
                **trouble.settings,
            )
            s.start_web()
            event = samples.payment_events(rng)[2]
            pk = payment_key_of(event)
            assert s.send(samples.encode(event)).status_code == 200
            log = s.start_worker().log
            assert log is not None
            wait_until(lambda: downstream.calls[pk] == 1, what="the call in flight")
            trouble.begin()
            try:
                gate.set()  # it applies and answers 200 while Redis cannot take a write
                # Until two writes of the outcome have failed, far within the lease.
                wait_until(
                    lambda: log.read_text().count("outcome not recorded yet") >= 2,
                    what="two failed writes of the outcome",
                )
                assert trouble.said in log.read_text()
            finally:
                trouble.end()
            wait_until(lambda: state_of(redis, pk) == "fulfilled", what="fulfilled")
            record = payments.payment(redis, pk)
            assert record is not None
            assert [a.outcome for a in record.attempts] == ["fulfilled"]
            assert downstream.calls[pk] == 1
    finally:
        redis.close()
        own.stop()
