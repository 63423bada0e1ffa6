"""Clients that pipeline requests and never read an answer keep no slot and do not starve
deliveries, at any REQUESTS_PER_CONNECTION: 30 such connections against the real gunicorn
with REQUESTS_PER_CONNECTION=1000. Pipelined requests come from a buffer and their answers
go to one without blocking, so a connection pipelining a thousand requests held its process
for all of them; and once its client's buffers were full its answer's write blocked with
no deadline, in a phase never shed. Now a pipelining connection waits its turn between
requests, an answer not taken within ANSWER_WRITE_TIMEOUT resets its connection, and at the
cap such a connection is shed (webhook/server.py, webhook/connections.py)."""

from pathlib import Path

import requests
from redis import Redis

from tests.support.attackers import Pipelining
from tests.support.constants import SECRET
from tests.support.helpers import paid_event, signed_headers, stats
from tests.support.processes import Gunicorn, RedisServer, service_env, wait_until

ATTACKERS = 30
ROUNDS = 4
ANSWERED_WITHIN = 5.0
"""Seconds a delivery may wait for its answer at all (Stripe itself waits longer)."""


def test_pipelining_clients_that_never_read_do_not_starve_deliveries(
    redis_server: RedisServer, redis: Redis, rng, tmp_path: Path
) -> None:
    env = service_env(
        redis_server.url,
        {
            "STRIPE_WEBHOOK_SECRET": SECRET,
            "REQUESTS_PER_CONNECTION": "1000",
            "ANSWER_WRITE_TIMEOUT": "1",
            "GUNICORN_WORKER_CONNECTIONS": "10",  # fewer slots than attackers: some are shed
        },
    )
    web = Gunicorn(env, workers=2, log=tmp_path / "gunicorn.log").start()
    answers = []
    try:
        with Pipelining(web.port, ATTACKERS, "127.0.0.2").running() as attack:
            for n in range(ROUNDS):
                # Each round once the attack has replaced half its connections again: the
                # server let go of the ones it had (done, reset at their deadline, or shed).
                goal = ATTACKERS + (n + 1) * ATTACKERS // 2
                wait_until(lambda goal=goal: attack.opened >= goal, 60, what=f"{goal} opened")
                _, body = paid_event(rng)
                try:
                    answer = requests.post(
                        f"{web.url}/webhooks/stripe", data=body, headers=signed_headers(body),
                        timeout=ANSWERED_WITHIN,
                    )  # fmt: skip
                    answers.append(answer.status_code)
                except requests.RequestException as exc:
                    answers.append(type(exc).__name__)
            assert attack.sent > ATTACKERS * 1000  # it did pipeline, far past one connection's
    finally:
        web.stop()
    assert answers == [200] * ROUNDS
    assert stats(redis)["deliveries"] == ROUNDS
    assert web.log is not None
    assert "Traceback" not in web.log.read_text()


def test_an_answer_not_taken_within_its_deadline_resets_its_connection(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """One client pipelining for ever on one connection (REQUESTS_PER_CONNECTION at its
    most) and reading nothing: once its buffers are full the answer's write blocks, and at
    ANSWER_WRITE_TIMEOUT the connection is reset; the client connects again."""
    env = service_env(
        redis_server.url,
        {
            "STRIPE_WEBHOOK_SECRET": SECRET,
            "REQUESTS_PER_CONNECTION": "1000000",
            "ANSWER_WRITE_TIMEOUT": "1",
        },
    )
    web = Gunicorn(env, workers=1, log=tmp_path / "gunicorn.log").start()
    try:
        with Pipelining(web.port, 1, "127.0.0.2").running() as attack:
            wait_until(lambda: attack.opened >= 3, 60, what="its connection reset, twice")
    finally:
        web.stop()
    assert web.log is not None
    assert "Traceback" not in web.log.read_text()
