"""The sweeper drops the registrations of RQ workers that died unannounced (kill -9, OOM,
a supervisor's SIGKILL): the shipped worker runs no RQ maintenance, so before, each stayed
in its queue's set for good, and every /metrics scrape, summary and dashboard looked each
one up (5,000 of them took a scrape from 12 ms to 750 ms). A live worker's stays."""

from redis import Redis
from rq import Queue, Worker

from ledger import keys, settings
from ledger.attempts import Attempts
from workers.sweeper import sweep_once


def test_a_sweep_drops_dead_workers_registrations_and_keeps_the_live_ones(
    redis: Redis, redis_server
) -> None:
    s = settings.load(
        {}, REDIS_URL=redis_server.url, STRIPE_WEBHOOK_SECRET="whsec_x", STRIPE_MODE="test"
    )
    queue = Queue(s.QUEUE_NAME, connection=redis)
    live = Worker([queue], connection=redis, name="live")
    live.register_birth()
    members = f"rq:workers:{s.QUEUE_NAME}"
    dead = [f"rq:worker:dead-{n}" for n in range(2000)]  # their keys expired long ago
    redis.sadd(members, *dead)
    redis.sadd("rq:workers", *dead)
    assert redis.scard(members) == 2001
    sweep_once(Attempts(redis, s))
    assert redis.smembers(members) == {live.key.encode()}
    assert redis.smembers("rq:workers") == {live.key.encode()}
    assert redis.exists(keys.SWEEPER)  # the pass finished
