"""Hostile connections cannot take every connection slot: signed deliveries are answered 200
within 1 s, and /healthz answers, while twice the server's total connection cap of slow but
valid clients run (a whole header block, then a body byte a second, the next slow request
at once on the same connection), and while as many idle connections that never send a
byte run (webhook/server.py, webhook/connections.py).

The attack comes from 127.0.0.2 and the deliveries from 127.0.0.1 (all of 127.0.0.0/8 is
loopback on Linux), so the per-address cap can tell them apart; with the cap off the
attack comes from 127.0.0.1 too, and what holds is the rest: a rejection closes its
connection, and near the cap the oldest idle or slow connection makes room for a new one.
"""

import http.client
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from redis import Redis

from bench.cpu import cpu_seconds
from ledger import keys
from tests.support.attackers import BODY, Attack
from tests.support.constants import SECRET
from tests.support.helpers import paid_event, signed_headers, stats
from tests.support.processes import Gunicorn, RedisServer, service_env, wait_until

WORKERS = 2
CONNECTIONS = int(os.environ.get("SLOTS_WORKER_CONNECTIONS", "50"))
"""Per process; SLOTS_WORKER_CONNECTIONS=500 runs the shipped default (2,000 hostile
connections per case: on a quiet machine only)."""
HOSTILE = 2 * WORKERS * CONNECTIONS
"""Twice the total connection cap."""
DELIVERIES = 5


@pytest.fixture(params=["per-address cap", "no per-address cap"])
def setup(
    request: pytest.FixtureRequest, redis_server: RedisServer, redis: Redis, tmp_path: Path
) -> Iterator[tuple[Gunicorn, str]]:
    capped = request.param == "per-address cap"
    env = service_env(
        redis_server.url,
        {
            "STRIPE_WEBHOOK_SECRET": SECRET,
            "GUNICORN_WORKER_CONNECTIONS": str(CONNECTIONS),
            "CONNECTIONS_PER_ADDRESS": "10" if capped else "0",
        },
    )
    web = Gunicorn(env, workers=WORKERS, log=tmp_path / "gunicorn.log").start()
    yield web, "127.0.0.2" if capped else "127.0.0.1"
    web.stop()


def answered_in_time(web: Gunicorn, rng, redis: Redis) -> list[tuple[str, int, float]]:
    """A signed delivery, then /healthz: (what, status, seconds)."""
    _, body = paid_event(rng)
    results = []
    for what, call in [
        (
            "delivery",
            lambda: requests.post(
                f"{web.url}/webhooks/stripe", data=body, headers=signed_headers(body), timeout=5
            ),
        ),
        ("healthz", lambda: requests.get(f"{web.url}/healthz", timeout=5)),
    ]:
        started = time.monotonic()
        try:
            status = call().status_code
        except requests.RequestException:
            status = 0
        results.append((what, status, time.monotonic() - started))
    return results


def progress(attack: Attack) -> int:
    """How far the attack has gone: body bytes sent (slow), connections opened (idle)."""
    return attack.body_bytes if attack.slow else attack.opened


def deliveries_during(attack: Attack, web: Gunicorn, rng, redis: Redis) -> list:
    """DELIVERIES rounds: the first once the attack has gone through a whole round (every
    attacker's slow body sent; every idle connection opened twice), then one round each
    time it has gone a quarter of that further."""
    whole = HOSTILE * len(BODY) if attack.slow else 2 * HOSTILE
    results = []
    with attack.running():
        for n in range(DELIVERIES):
            goal = whole + n * whole // 4
            wait_until(lambda goal=goal: progress(attack) >= goal, 60)
            results += answered_in_time(web, rng, redis)
    return results


@pytest.mark.parametrize("slow", [True, False], ids=["slow-valid", "idle"])
def test_hostile_connections_leave_room_for_deliveries(setup, slow: bool, redis: Redis, rng):
    web, source = setup
    capped = source != "127.0.0.1"
    attack = Attack(web.port, HOSTILE, source, slow=slow)
    cpu_before = cpu_seconds(web.pids())
    results = deliveries_during(attack, web, rng, redis)
    cpu = cpu_seconds(web.pids()) - cpu_before
    late = [r for r in results if r[1] != 200 or r[2] >= 1.0]
    slowest = max(seconds for _, _, seconds in results)
    print(  # the figures docs/DEPLOYMENT.md quotes: run with -s
        f"{HOSTILE} hostile ({'slow' if slow else 'idle'}) from {source}: slowest answer"
        f" {slowest:.3f} s; {attack.opened} connections opened, web CPU {cpu:.1f} s"
        f" ({1000 * cpu / attack.opened:.2f} ms each); answers {dict(attack.statuses)}"
    )
    assert not late, results
    assert stats(redis)["deliveries"] == DELIVERIES
    assert attack.kept_alive_after_rejection == 0, attack.statuses
    if capped:  # the attacker's address is over its cap: refused, counted
        assert stats(redis)["rejected:too_many_connections"] > 0
    elif slow:  # the oldest slow bodies gave way to new connections, counted
        assert stats(redis)["rejected:connection_shed"] > 0
    assert web.log is not None
    assert "Traceback" not in web.log.read_text()


def test_a_connection_ends_after_a_rejection_or_its_last_request(
    redis_server: RedisServer, redis: Redis, rng, tmp_path: Path
) -> None:
    env = service_env(
        redis_server.url, {"STRIPE_WEBHOOK_SECRET": SECRET, "REQUESTS_PER_CONNECTION": "2"}
    )
    web = Gunicorn(env, workers=1, log=tmp_path / "gunicorn.log").start()
    try:
        kept = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        answers = []
        for _ in range(2):
            _, body = paid_event(rng)
            kept.request("POST", "/webhooks/stripe", body, signed_headers(body))
            answer = kept.getresponse()
            answer.read()
            answers.append((answer.status, answer.getheader("Connection")))
        kept.close()
        assert answers == [(200, "keep-alive"), (200, "close")]
        for request in [
            b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            b"\r\nContent-Length: 2\r\n\r\n{}",  # no signature
            b"GET /ops/api/payments HTTP/1.1\r\nHost: x\r\n\r\n",  # no token
            b"GET /no/such/page HTTP/1.1\r\nHost: x\r\n\r\n",
        ]:
            with socket.create_connection(("127.0.0.1", web.port), timeout=10) as sock:
                sock.sendall(request)  # HTTP/1.1: keep-alive unless told otherwise
                raw = b""
                while piece := sock.recv(65536):  # until the server closes (else: timeout)
                    raw += piece
            head = raw.partition(b"\r\n\r\n")[0]
            assert raw.startswith(b"HTTP/1.1 4") and b"Connection: close" in head, raw
    finally:
        web.stop()


def test_the_per_address_cap_and_trusted_proxies(
    redis_server: RedisServer, redis: Redis, tmp_path: Path
) -> None:
    """One address holds at most CONNECTIONS_PER_ADDRESS per process; a trusted proxy is
    exempt, and only its X-Forwarded-For names the client a rejection records."""
    env = service_env(
        redis_server.url,
        {
            "STRIPE_WEBHOOK_SECRET": SECRET,
            "CONNECTIONS_PER_ADDRESS": "2",
            "TRUSTED_PROXIES": "127.0.0.3",
        },
    )
    web = Gunicorn(env, workers=1, log=tmp_path / "gunicorn.log").start()
    held: list[socket.socket] = []
    try:
        for source in ["127.0.0.2"] * 2 + ["127.0.0.3"] * 4:
            held.append(socket.create_connection(("127.0.0.1", web.port), 10, (source, 0)))
        refused = socket.create_connection(("127.0.0.1", web.port), 10, ("127.0.0.2", 0))
        with refused:
            assert refused.recv(65536).startswith(b"HTTP/1.1 429")
        assert stats(redis)["rejected:too_many_connections"] == 1
        unsigned = (
            b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"X-Forwarded-For: 203.0.113.9, 198.51.100.7\r\nContent-Length: 2\r\n\r\n{}"
        )
        for sock in (held[0], held[-1]):  # from 127.0.0.2, then from the proxy
            sock.sendall(unsigned)
            assert sock.recv(65536).startswith(b"HTTP/1.1 400")
        records = [json.loads(r) for r in redis.lrange(keys.REJECTIONS, 0, 1)]
        assert [r["remote"] for r in records] == ["198.51.100.7", "127.0.0.2"]  # newest first
    finally:
        for sock in held:
            sock.close()
        web.stop()
