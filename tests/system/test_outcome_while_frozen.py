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

from ledger.read import payments
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import payment_key_of, state_of
from tests.support.processes import RedisServer, wait_until


def test_an_outcome_written_while_redis_is_frozen_is_recorded_once_it_thaws(
    stack, rng, tmp_path
) -> None:
    own = RedisServer(tmp_path / "redis").start()  # frozen by the test: not the shared one
    redis = own.client()
    try:
        with CountingDownstream() as downstream:
            gate = downstream.hold_first_call()
            s = stack(
                REDIS_URL=own.url,
                FULFILMENT_ACTION=downstream.url,
                FULFILMENT_REPLAY_SAFE="false",
                FULFILMENT_TIMEOUT="3",
                LEASE_SECONDS="20",
                REDIS_SOCKET_TIMEOUT="0.3",
                REDIS_RETRIES="1",
            )
            s.start_web()
            event = samples.payment_events(rng)[2]
            pk = payment_key_of(event)
            assert s.send(samples.encode(event)).status_code == 200
            log = s.start_worker().log
            assert log is not None
            wait_until(lambda: downstream.calls[pk] == 1, what="the call in flight")
            os.kill(own.pid, signal.SIGSTOP)
            try:
                gate.set()  # it applies and answers 200 while Redis is frozen
                # Frozen until two writes of the outcome have failed, far within the lease.
                wait_until(
                    lambda: log.read_text().count("outcome not recorded yet") >= 2,
                    what="two failed writes of the outcome",
                )
            finally:
                os.kill(own.pid, signal.SIGCONT)
            wait_until(lambda: state_of(redis, pk) == "fulfilled", what="fulfilled")
            record = payments.payment(redis, pk)
            assert record is not None
            assert [a.outcome for a in record.attempts] == ["fulfilled"]
            assert downstream.calls[pk] == 1
    finally:
        redis.close()
        own.stop()


def test_an_outcome_refused_for_want_of_replicas_is_recorded_once_they_are_back(
    stack, rng, tmp_path
) -> None:
    own = RedisServer(tmp_path / "redis").start()  # its writes refused by the test
    redis = own.client()
    try:
        with CountingDownstream() as downstream:
            gate = downstream.hold_first_call()
            s = stack(
                REDIS_URL=own.url,
                FULFILMENT_ACTION=downstream.url,
                FULFILMENT_REPLAY_SAFE="false",
                FULFILMENT_TIMEOUT="3",
                LEASE_SECONDS="20",
            )
            s.start_web()
            event = samples.payment_events(rng)[2]
            pk = payment_key_of(event)
            assert s.send(samples.encode(event)).status_code == 200
            log = s.start_worker().log
            assert log is not None
            wait_until(lambda: downstream.calls[pk] == 1, what="the call in flight")
            redis.config_set("min-replicas-to-write", 1)  # no replica: every write refused
            try:
                gate.set()  # it applies and answers 200 while writes are refused
                wait_until(
                    lambda: log.read_text().count("outcome not recorded yet") >= 2,
                    what="two refused writes of the outcome",
                )
                assert "NOREPLICAS" in log.read_text()
            finally:
                redis.config_set("min-replicas-to-write", 0)
            wait_until(lambda: state_of(redis, pk) == "fulfilled", what="fulfilled")
            record = payments.payment(redis, pk)
            assert record is not None
            assert [a.outcome for a in record.attempts] == ["fulfilled"]
            assert downstream.calls[pk] == 1
    finally:
        redis.close()
        own.stop()
