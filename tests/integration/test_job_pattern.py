"""Each process fills RQ's own commands in for a job instead of having RQ build every one
(ledger/enqueue.py): the commands are RQ's for any payment key, and an RQ that builds jobs
some other way is left to build every job itself."""

import logging

import pytest
from redis import Redis
from rq.job import Job

from ledger import settings
from ledger.enqueue import FULFIL_JOB, Jobs, PreparedJob
from tests.support.helpers import run_captured

KEYS = ["pi_3QwErTy1234567890abcdef", "cs_test_a1" + "b" * 60, "in_1", "ch_" + "9" * 250, "pi_é"]
AT = "2001-02-03T04:05:06.000007Z"


def jobs_for(redis_server) -> Jobs:
    s = settings.load({}, REDIS_URL=redis_server.url, STRIPE_MODE="test")
    return Jobs(Redis.from_url(s.REDIS_URL), s)


def same_but_id_and_times(job: PreparedJob, other: PreparedJob) -> list:
    """``other``'s commands as ``job``'s would read with ``job``'s id and one time."""
    renamed = {other.job_id: job.job_id, f"rq:job:{other.job_id}": f"rq:job:{job.job_id}"}
    words = [renamed.get(w, w) if isinstance(w, str) else w for w in other.commands]
    return [
        AT if i and words[i - 1] in ("created_at", "enqueued_at") else w
        for i, w in enumerate(words)
    ]


@pytest.mark.parametrize("payment_key", KEYS)
def test_a_filled_in_job_is_word_for_word_the_one_rq_builds(redis_server, payment_key) -> None:
    jobs = jobs_for(redis_server)
    filled, built = jobs.prepare(payment_key), jobs.built_by_rq(payment_key)
    assert jobs.patterned
    assert filled.job_id != built.job_id
    assert same_but_id_and_times(filled, filled) == same_but_id_and_times(filled, built)


def test_a_filled_in_job_runs_as_rq_reads_it(redis: Redis, redis_server) -> None:
    jobs = jobs_for(redis_server)
    first, second = jobs.prepare("pi_one"), jobs.prepare("pi_two")
    assert jobs.patterned and first.job_id != second.job_id
    for job in (first, second):
        run_captured(redis, job.commands)
    for job, key in ((first, "pi_one"), (second, "pi_two")):
        fetched = Job.fetch(job.job_id, connection=redis)
        assert (fetched.func_name, fetched.args, fetched.description) == (
            FULFIL_JOB,
            (key,),
            f"fulfil {key}",
        )
        assert fetched.enqueued_at is not None and fetched.created_at is not None


def test_an_rq_that_builds_jobs_otherwise_builds_every_job(
    redis_server, monkeypatch, caplog
) -> None:
    """A word that depends on the payment key where the pattern has no slot for it: the
    pattern would give the first key's word to every job, so RQ builds each."""
    rq_build = Jobs.built_by_rq

    def with_a_keyed_word(self: Jobs, payment_key: str) -> PreparedJob:
        job = rq_build(self, payment_key)
        extra = ["HSET", f"rq:job:{job.job_id}", "meta_key", payment_key.upper()]
        return PreparedJob(job.job_id, [*job.commands, len(extra), *extra])

    monkeypatch.setattr(Jobs, "built_by_rq", with_a_keyed_word)
    jobs = jobs_for(redis_server)
    with caplog.at_level(logging.WARNING, logger="ledger.enqueue"):
        job = jobs.prepare("pi_x")
    assert not jobs.patterned
    assert "unlike the pattern" in caplog.text
    assert job.commands[-1] == "PI_X"
