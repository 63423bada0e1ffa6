"""RQ's job timeout against the attempt, in real worker processes: a job whose timeout no
longer leaves the time its attempt needs (enqueued with an older, shorter timeout; held in
Stripe's API reads) defers its payment before the lease instead of calling, and a fresh job
fulfils it. Called anyway, RQ would end the job past the call and before its outcome was
written: the effect applied, the payment left to its lease's expiry, then ``interrupted``."""

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job

from ledger import keys
from ledger.read import payments
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import payment_key_of, settled_as
from tests.support.processes import wait_until

SHORT_TIMEOUT = 2
"""The first job's RQ timeout: shorter than its call (CALL_SECONDS), far shorter than the
attempt the settings below need (LEASE_SECONDS + FULFILMENT_TIMEOUT + 5 s)."""

CALL_SECONDS = 2.5


@pytest.mark.parametrize(
    ("worker_class", "slots"),
    [("rq.worker.SimpleWorker", "1"), ("workers.inflight.InFlightWorker", "2")],
    ids=["SimpleWorker", "InFlightWorker"],
)
def test_a_job_without_the_time_for_its_attempt_defers_and_a_fresh_job_fulfils_once(
    worker_class: str, slots: str, stack, redis: Redis, rng
) -> None:
    with CountingDownstream(delays=[CALL_SECONDS]) as downstream:
        s = stack(
            FULFILMENT_ACTION=downstream.url,
            FULFILMENT_TIMEOUT="5",
            LEASE_SECONDS="8",
            FULFILMENT_CONCURRENCY=slots,
        )
        s.start_web()
        event = samples.payment_events(rng)[2]
        pk = payment_key_of(event)
        assert s.send(samples.encode(event)).status_code == 200
        first_id = (redis.hget(keys.payment(pk), "job") or b"").decode()
        first = Job.fetch(first_id, connection=redis)
        first.timeout = SHORT_TIMEOUT  # as a job enqueued before LEASE_SECONDS was raised
        first.save()
        s.start_sweeper()
        worker = s.start_worker(worker_class)

        def ended() -> bool:
            return settled_as(redis, pk, "fulfilled") or settled_as(redis, pk, "interrupted")

        wait_until(ended, timeout=60, what=f"{pk} fulfilled or interrupted")
        record = payments.payment(redis, pk)
        assert record is not None and record.state == "fulfilled", record.state
        assert downstream.calls[pk] == 1 and record.attempts_started == 1
        assert redis.hget(keys.payment(pk), "job") != first_id.encode()  # a fresh job's
        assert Queue("fulfilment", connection=redis).failed_job_registry.count == 0
        assert int(redis.hget(keys.STATS, "deferred:job_timeout") or 0) == 1
        assert worker.proc is not None and worker.proc.poll() is None
