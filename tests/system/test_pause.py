"""Pausing fulfilment with real gunicorn, RQ workers and sweeper: no downstream call while
paused (through a restart of every worker), intake goes on, the payments wait (not failed),
and once resumed each is fulfilled exactly once."""

import random

import requests
from redis import Redis

from ledger import keys
from ledger.read import stats
from tests.support.constants import BEARER, OPS_TOKEN
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import cli_ok, paid_event, payment_key_of, run_cli, state_of
from tests.support.processes import wait_until
from tests.support.stack import Stack
from webhook.http import csrf_token


def send(s: Stack, rng: random.Random, count: int) -> list[str]:
    payments = []
    for _ in range(count):
        event, body = paid_event(rng)
        assert s.send(body).status_code == 200
        payments.append(payment_key_of(event))
    return payments


def waiting_paused(redis: Redis) -> int:
    return int(redis.zcard(keys.waiting("paused")))


def test_paused_through_a_worker_restart_then_each_fulfilled_once(
    stack, redis, config, rng
) -> None:
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url)
        web = s.start_web()
        workers = [s.start_worker(), s.start_worker()]
        s.start_sweeper()
        paused = run_cli(config, "fulfilment", "pause", "--reason", "ERP deploy", "--json")
        assert cli_ok(paused), paused.output
        first = send(s, rng, 15)
        wait_until(lambda: waiting_paused(redis) == 15, what="15 waiting")
        for worker in workers:
            worker.stop()
        s.start_worker()
        later = send(s, rng, 5)  # intake goes on; the new worker defers them too
        wait_until(lambda: waiting_paused(redis) == 20, what="20 waiting")
        assert downstream.bodies == []
        assert {state_of(redis, pk) for pk in first + later} == {"retrying"}
        status = requests.get(f"{web.url}/ops/api/fulfilment", headers=BEARER, timeout=10)
        now = status.json()
        assert now["paused"]["reason"] == "ERP deploy"
        assert now["paused"]["by"].startswith("cli")
        assert now["waiting"]["paused"] == 20
        assert stats.counters(redis).payments_by_state["failed"] == 0
        scraped = requests.get(f"{web.url}/metrics", headers=BEARER, timeout=10).text
        assert "webhook_fulfilment_paused 1.0" in scraped
        assert 'webhook_fulfilment_waiting{reason="paused"} 20.0' in scraped

        resumed = requests.post(
            f"{web.url}/ops/api/fulfilment/resume",
            headers={**BEARER, "X-CSRF-Token": csrf_token(OPS_TOKEN)},
            timeout=10,
        )
        assert resumed.status_code == 200 and resumed.json()["paused"] is None
        assert resumed.json()["resumed_by"] == "ops:default"
        wait_until(
            lambda: all(state_of(redis, pk) == "fulfilled" for pk in first + later), timeout=60
        )
        assert {pk: downstream.successes[pk] for pk in first + later} == {
            pk: 1 for pk in first + later
        }
        assert waiting_paused(redis) == 0


def test_a_second_pause_keeps_the_first_and_the_cli_shows_it(config, redis) -> None:
    first = run_cli(config, "fulfilment", "pause", "--reason", "first")
    again = run_cli(config, "fulfilment", "pause", "--reason", "second", "--json")
    assert cli_ok(first) and cli_ok(again)
    assert '"reason": "first"' in again.output  # the first pause's why is kept
    shown = run_cli(config, "fulfilment", "status")
    assert cli_ok(shown) and "PAUSED" in shown.output and "first" in shown.output
    summary = run_cli(config, "summary")
    assert cli_ok(summary) and "PAUSED" in summary.output
    done = run_cli(config, "fulfilment", "resume")
    assert cli_ok(done) and "running" in done.output
    assert redis.exists(keys.PAUSE) == 0
