"""The fault matrix, continued: Redis killed during a storm, Redis stalling under client
timeouts and retries, and the CI-sized soak with random faults of every kind."""

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ledger import keys
from ledgerctl import samples
from ledgerctl.checker import check
from tests.support.constants import BASIC, BEARER
from tests.support.helpers import post_webhook, signed_headers
from tests.support.processes import ROOT, Gunicorn, RedisServer, free_port, service_env


def test_redis_killed_during_a_storm_and_restarted_from_its_aof(config, rng, tmp_path) -> None:
    """Ordered by progress, never by wall time: Redis is killed once a third of the storm has
    been answered and restarted once the failures show, so quiet and busy machines agree."""
    port = free_port()
    data = tmp_path / "redis"
    server = RedisServer(data, port).start()
    env = service_env(
        server.url, {**{k: str(v) for k, v in config.items()}, "REDIS_URL": server.url}
    )
    web = Gunicorn(env, workers=2, log=tmp_path / "web.log").start()
    events = [e for _ in range(120) for e in samples.payment_events(rng)]
    answers: list[tuple[str, int | str]] = []
    progress = threading.Condition()
    restarted = threading.Event()

    def send(event: dict) -> None:
        status = post_webhook(web.url, samples.encode(event))
        with progress:
            answers.append((event["id"], status))
            progress.notify_all()
        if status != 200:  # like Stripe: hold off until the ledger is back, then go on
            restarted.wait(30)

    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(send, e) for e in events]
            with progress:
                progress.wait_for(lambda: len(answers) >= len(events) // 3, timeout=60)
            answered_at_kill = len(answers)
            server.kill()  # SIGKILL mid-storm
            with progress:
                noticed = progress.wait_for(
                    lambda: any(st != 200 for _, st in answers[answered_at_kill:]), timeout=60
                )
            server = RedisServer(data, port).start()  # same dir: replays the append-only file
            restarted.set()
            for f in futures:
                f.result()
        redis = Redis.from_url(server.url)
        acked: dict[str, int] = {}
        for event_id, status in answers:
            if status == 200:
                acked[event_id] = acked.get(event_id, 0) + 1
        recorded = {e: int(redis.hget(keys.event(e), "n") or 0) for e in acked}
        found = check(acked, recorded, set(), {}, {})
        assert found.lost == [], found.lost
        statuses = {status for _, status in answers}
        assert 200 in statuses and statuses - {200} <= {503, 0}, statuses
        assert noticed, "the kill should have been noticed"
        assert answered_at_kill < len(events), "the kill landed mid-storm"
        assert any(st == 200 for _, st in answers[answered_at_kill:]), "acks after the restart"
        assert sum(acked.values()) > 50
    finally:
        restarted.set()
        web.stop()
        server.stop()


def test_slow_redis_timeouts_and_retries_keep_counts_exact(stack, redis, rng) -> None:
    """Ordered by progress: each wave is sent only once a probe has seen Redis stalled, so the
    requests meet the stall on a quiet machine as on a busy one (CI once finished them all
    before the first stall began)."""
    s = stack(REDIS_SOCKET_TIMEOUT="0.25", REDIS_RETRIES="8")
    web = s.start_web()
    port = redis.connection_pool.connection_kwargs["port"]
    events = [samples.payment_events(rng)[2] for _ in range(60)]
    redis.config_resetstat()
    waves = 0
    with ThreadPoolExecutor(8) as pool:
        while waves < 3 or (not _retried(redis, waves) and waves < 8):
            staller = _stall_seen(port)
            statuses = list(pool.map(lambda e: post_webhook(web.url, samples.encode(e)), events))
            staller.join()
            waves += 1
            assert statuses == [200] * len(events)
    assert int(redis.hget(keys.STATS, "deliveries")) == 60 * waves
    assert all(redis.hget(keys.event(e["id"]), "n") == str(waves).encode() for e in events)
    assert _retried(redis, waves), "retries happened"


def _stall_seen(port: int) -> threading.Thread:
    """The thread of a ``DEBUG SLEEP`` that a probe saw Redis inside (its PING timed out;
    tried once: redis-py retries by default). Probes until that stall ends; one a busy
    machine's probe missed is started again."""
    probe = Redis(port=port, socket_timeout=0.1, retry=Retry(NoBackoff(), 0))
    for _ in range(10):
        staller = threading.Thread(
            target=lambda: Redis(port=port).execute_command("DEBUG", "SLEEP", "0.8")
        )
        staller.start()
        while staller.is_alive():
            try:
                probe.ping()
            except RedisTimeoutError:
                return staller
        staller.join()
    raise AssertionError("no probe saw Redis stall in 10 stalls")


def _retried(redis: Redis, waves: int) -> bool:
    """More record_delivery calls (FCALL) than deliveries means some timed out and were
    sent again."""
    return redis.info("commandstats")["cmdstat_fcall"]["calls"] > 60 * waves


@pytest.mark.timeout(400)
def test_short_soak_loses_and_doubles_nothing(tmp_path) -> None:
    """The CI-sized soak: about 40 s of traffic with random faults, then the checker."""
    import subprocess
    import sys

    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "soak.py"),
            "--duration",
            "40",
            "--fault-interval",
            "3",
            "--settle",
            "90",
            "--workdir",
            str(tmp_path / "soak"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    result = json.loads(out.read_text())
    assert proc.returncode == 0, result["findings"]
    assert result["lost"] == 0 and result["duplicated"] == 0
    assert result["findings"]["unfulfilled"] == []
    assert result["faults_total"] >= 8 and result["deliveries_acked"] > 1000
    assert result["reversals"]["ok"] and result["reversals"]["taken_back"] > 0


def test_redis_down_under_gunicorn_answers_503_without_a_traceback(config, tmp_path) -> None:
    """The issue's case: Redis stopped while the web process runs; the dashboard, the API and
    /metrics answered a generic HTML 500 and logged tracebacks. The dashboard and the API
    answer 503; /metrics still answers, with webhook_ledger_up 0, so the outage is scraped."""
    server = RedisServer(tmp_path / "redis").start()
    env = service_env(
        server.url, {**{k: str(v) for k, v in config.items()}, "REDIS_URL": server.url}
    )
    log = tmp_path / "web.log"
    web = Gunicorn(env, workers=2, log=log).start()
    try:
        assert requests.get(f"{web.url}/ops/api/summary", headers=BEARER, timeout=10).ok
        server.kill()
        for path, headers, kind in [
            ("/ops/api/summary", BEARER, "application/json"),
            ("/ops/", BASIC, "text/html"),
        ]:
            answer = requests.get(f"{web.url}{path}", headers=headers, timeout=30)
            assert answer.status_code == 503, (path, answer.text[:200])
            assert answer.headers["Content-Type"].startswith(kind)
            assert "Connection refused" in answer.text
        metrics = requests.get(f"{web.url}/metrics", headers=BEARER, timeout=30)
        assert metrics.status_code == 200, metrics.text[:200]
        assert "\nwebhook_ledger_up 0.0\n" in metrics.text
    finally:
        web.stop()
        server.stop()
    text = log.read_text()
    assert "Traceback" not in text and text.count('"status":503') == 2


def test_redis_frozen_answers_each_waiting_request_within_its_retries(
    config, rng, tmp_path
) -> None:
    """Redis stopped (SIGSTOP, a stalled VM: the kernel still accepts its connections) under
    concurrent deliveries and ops reads. Each new connection's health check was retried
    inside each retry of the command, so most requests waited 16 socket timeouts (34 s at
    the defaults, past Stripe's wait) instead of 4. Now every request gets its 503 within
    REDIS_RETRIES + 1 tries. Redis runs what was sent to it once it thaws, so a delivery
    answered 503 may stand; sent again it counts as a second one, never more (each try of
    one request carries its request id)."""
    server = RedisServer(tmp_path / "redis").start()
    timeout, retries = 1.0, 3  # tries take 4 s or so; the nested retries took 16
    env = service_env(
        server.url,
        {
            **{k: str(v) for k, v in config.items()},
            "REDIS_URL": server.url,
            "REDIS_SOCKET_TIMEOUT": str(timeout),
            "REDIS_RETRIES": str(retries),
        },
    )
    web = Gunicorn(env, workers=1, log=tmp_path / "web.log").start()
    events = [samples.payment_events(rng)[2] for _ in range(6)]
    answers: list[tuple[str, int, float]] = []

    def request(what: str, method: str, path: str, **kwargs) -> None:
        started = time.monotonic()
        answer = requests.request(method, f"{web.url}{path}", timeout=60, **kwargs)
        error = answer.json().get("error") if answer.status_code == 503 else None
        answers.append((f"{what} {error}", answer.status_code, time.monotonic() - started))

    calls = [("summary", "GET", "/ops/api/summary", {"headers": BEARER})] * 3
    for event in events:
        body = samples.encode(event)
        sent = {"data": body, "headers": signed_headers(body)}
        calls.append(("delivery", "POST", "/webhooks/stripe", sent))
    try:
        assert requests.get(f"{web.url}/ops/api/summary", headers=BEARER, timeout=10).ok
        os.kill(server.pid, signal.SIGSTOP)
        try:
            threads = [
                threading.Thread(target=request, args=call[:3], kwargs=call[3]) for call in calls
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=90)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert sorted(a[:2] for a in answers) == sorted(
            [("delivery ledger_unavailable", 503)] * 6 + [("summary ledger_unavailable", 503)] * 3
        ), answers
        # (retries + 1) tries of one socket timeout each, and their backoff; the nested
        # retries took (retries + 1) squared of them.
        bound = (retries + 1) * timeout * 2
        assert max(took for *_, took in answers) < bound, answers
        for event in events:  # Stripe sends each again
            assert post_webhook(web.url, samples.encode(event)) == 200
        redis = Redis.from_url(server.url)
        counted = [int(redis.hget(keys.event(e["id"]), "n") or 0) for e in events]
        assert set(counted) <= {1, 2}, counted
    finally:
        web.stop()
        server.stop()
