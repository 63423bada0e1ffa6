"""The fault matrix: each cell a real fault in real processes, with the outcome the README
promises. Expected outcomes are tabled in docs/RELIABILITY.md."""

import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest
import requests
from redis import Redis

from ledger import keys, queries
from ledger.downstream import read_downstream
from ledgerctl import samples
from ledgerctl.checker import check
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import (
    after_sweeps,
    payment_key_of,
    settled_as,
    signed_headers,
    state_of,
)
from tests.support.processes import (
    Gunicorn,
    RedisServer,
    children,
    free_port,
    service_env,
    wait_until,
)

# point -> action -> (final state, downstream calls, effects when the downstream records them)
JOB_FAULTS = {
    "after_lease": {"sqlite": ("fulfilled", 1, 1), "http": ("fulfilled", 1, None)},
    "before_action": {"sqlite": ("fulfilled", 1, 1), "http": ("interrupted", 0, None)},
    "after_action": {"sqlite": ("fulfilled", 2, 1), "http": ("interrupted", 1, None)},
    "during_record": {"sqlite": ("fulfilled", 1, 1), "http": ("fulfilled", 1, None)},
}


def calls_and_effects(
    action: str, config: dict, downstream: CountingDownstream, pk: str
) -> tuple[int, int | None]:
    if action == "http":
        return downstream.calls[pk], None
    row = read_downstream(str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))[
        "payments"
    ].get(pk, {})
    return row.get("calls", 0), row.get("effects", 0)


def action_env(action: str, downstream: CountingDownstream) -> dict[str, str]:
    return {"FULFILMENT_ACTION": downstream.url} if action == "http" else {}


@pytest.mark.parametrize("action", ["sqlite", "http"])
@pytest.mark.parametrize("point", list(JOB_FAULTS))
def test_job_killed_at_fault_point(point: str, action: str, stack, redis, config, rng) -> None:
    with CountingDownstream() as downstream:
        s = stack(**action_env(action, downstream))
        s.start_web()
        event = samples.payment_events(rng)[2]
        assert s.send(samples.encode(event)).status_code == 200
        doomed = s.start_worker(FAULTPOINT=point)
        assert doomed.proc is not None and doomed.proc.wait(20) == -signal.SIGKILL
        s.start_worker()
        s.start_sweeper()
        state, calls, effects = JOB_FAULTS[point][action]
        pk = payment_key_of(event)
        wait_until(lambda: settled_as(redis, pk, state), what=f"{pk} {state}")
        after_sweeps(redis)  # further sweeps must not change anything
        assert state_of(redis, pk) == state
        assert calls_and_effects(action, config, downstream, pk) == (calls, effects)


@pytest.mark.parametrize("action", ["sqlite", "http"])
@pytest.mark.parametrize("point", ["receiver_after_verify", "receiver_after_record"])
def test_web_killed_at_fault_point(point: str, action: str, stack, redis, config, rng) -> None:
    with CountingDownstream() as downstream:
        s = stack(**action_env(action, downstream))
        s.start_web(FAULTPOINT=point)
        event = samples.payment_events(rng)[2]
        body = samples.encode(event)
        with pytest.raises(requests.ConnectionError):
            s.send(body)  # no answer: Stripe would retry
        s.start_web()
        assert s.send(body).status_code == 200  # the retry
        s.start_worker()
        wait_until(lambda: settled_as(redis, payment_key_of(event), "fulfilled"))
        recorded = int(redis.hget(keys.event(event["id"]), "n"))
        assert recorded == (1 if point == "receiver_after_verify" else 2)
        found = check(
            {event["id"]: 1},
            {event["id"]: recorded},
            {payment_key_of(event)},
            {payment_key_of(event): 1},
            {},
        )
        assert found.ok
        assert calls_and_effects(action, config, downstream, payment_key_of(event))[0] == 1


@pytest.mark.parametrize("action", ["sqlite", "http"])
def test_sweeper_killed_mid_scan(action: str, stack, redis, config, rng) -> None:
    with CountingDownstream() as downstream:
        s = stack(**action_env(action, downstream))
        s.start_web()
        events = [samples.payment_events(rng)[2] for _ in range(3)]
        for event in events:
            s.send(samples.encode(event))
        redis.delete("rq:queue:fulfilment")  # the jobs are lost
        for event in events:
            redis.zadd(keys.DUE, {payment_key_of(event): 0})
        doomed = s.start_sweeper(FAULTPOINT="sweeper_mid_scan")
        assert doomed.proc is not None and doomed.proc.wait(20) == -signal.SIGKILL
        assert sorted(state_of(redis, payment_key_of(e)) for e in events) == ["queued"] * 3
        assert redis.llen("rq:queue:fulfilment") == 1  # one was re-enqueued before the kill
        s.start_sweeper()
        s.start_worker()
        for event in events:
            wait_until(lambda e=event: settled_as(redis, payment_key_of(e), "fulfilled"))
            assert calls_and_effects(action, config, downstream, payment_key_of(event))[0] == 1


@pytest.mark.parametrize("action", ["sqlite", "http"])
def test_worker_sleeping_past_its_lease(action: str, stack, redis, config, rng) -> None:
    """The worker stalls after fencing its call, its lease expires, then it goes on."""
    with CountingDownstream() as downstream:
        s = stack(**action_env(action, downstream))
        s.start_web()
        event = samples.payment_events(rng)[2]
        pk = payment_key_of(event)
        s.send(samples.encode(event))
        s.start_worker(FAULTPOINT="before_action:sleep:5")
        wait_until(lambda: state_of(redis, pk) == "in_progress")
        s.start_sweeper()
        if action == "sqlite":  # replay-safe: a second worker re-runs it with the same key
            s.start_worker()
            wait_until(
                lambda: redis.hget(keys.payment(pk), "stale_finishes") == b"1", what="stale finish"
            )
            assert calls_and_effects(action, config, downstream, pk) == (2, 1)
        else:  # not replay-safe: interrupted, then the late answer of the same token proves it
            wait_until(lambda: settled_as(redis, pk, "fulfilled"), what="late receipt")
            assert orjson.loads(queries.payment(redis, pk)["attempts"][0])["late"] is True
            assert calls_and_effects(action, config, downstream, pk) == (1, None)
        assert state_of(redis, pk) == "fulfilled"


def test_whole_forking_rq_worker_killed_mid_job(stack, redis, rng) -> None:
    """RQ's trap: the killed worker's work-horse runs on. The ledger keeps it to one effect."""
    with CountingDownstream() as downstream:
        gate = downstream.hold_first_call()
        s = stack(FULFILMENT_ACTION=downstream.url, FULFILMENT_TIMEOUT="3", LEASE_SECONDS="5")
        s.start_web()
        event = samples.payment_events(rng)[2]
        pk = payment_key_of(event)
        s.send(samples.encode(event))
        parent = s.start_worker(worker_class="rq.worker.Worker")
        wait_until(lambda: downstream.calls[pk] == 1, what="call in flight")
        assert parent.proc is not None
        horses = children(parent.proc.pid)
        parent.proc.send_signal(signal.SIGKILL)
        parent.proc.wait(10)
        gate.set()
        wait_until(lambda: settled_as(redis, pk, "fulfilled"), what="orphaned horse finishes")
        s.start_worker()
        s.start_sweeper()
        lease_ms = 5000
        wait_until(lambda: redis_ms(redis) > fulfilled_ms(redis, pk) + lease_ms, what="a lease")
        after_sweeps(redis)  # a whole lease later: nothing may run it again
        assert downstream.calls[pk] == 1 and state_of(redis, pk) == "fulfilled"
        assert horses, "the forking worker had a work-horse"


def test_gunicorn_worker_killed_mid_request(stack, redis, rng) -> None:
    s = stack()
    web = s.start_web(FAULTPOINT="receiver_after_verify:sleep:5")
    assert web.log is not None
    web_log = web.log
    event = samples.payment_events(rng)[2]
    body = samples.encode(event)
    outcome: list[object] = []
    sender = threading.Thread(target=lambda: outcome.append(_post(web, body)))
    sender.start()
    wait_until(lambda: "fault point receiver_after_verify" in web_log.read_text(), what="in view")
    assert web.proc is not None
    for pid in children(web.proc.pid):
        import os

        os.kill(pid, signal.SIGKILL)
    sender.join(20)
    assert outcome and outcome[0] != 200  # never acknowledged
    assert redis.hget(keys.event(event["id"]), "n") is None
    s.start_web()
    assert s.send(body).status_code == 200
    assert redis.hget(keys.event(event["id"]), "n") == b"1"


def redis_ms(redis: Redis) -> int:
    seconds, micros = redis.time()
    return seconds * 1000 + micros // 1000


def fulfilled_ms(redis: Redis, pk: str) -> int:
    return int(redis.hget(keys.payment(pk), "fulfilled_at") or 0)


def _post(web: Gunicorn, body: bytes) -> object:
    try:
        return requests.post(
            f"{web.url}/webhooks/stripe", data=body, headers=signed_headers(body), timeout=15
        ).status_code
    except requests.RequestException as exc:
        return type(exc).__name__


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
    answers: list[tuple[str, int]] = []
    progress = threading.Condition()
    restarted = threading.Event()

    def send(event: dict) -> None:
        status = _status(web, samples.encode(event))
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


def _status(web: Gunicorn, body: bytes) -> int:
    try:
        return requests.post(
            f"{web.url}/webhooks/stripe", data=body, headers=signed_headers(body), timeout=15
        ).status_code
    except requests.RequestException:
        return 0


def test_slow_redis_timeouts_and_retries_keep_counts_exact(stack, redis, rng) -> None:
    s = stack(REDIS_SOCKET_TIMEOUT="0.25", REDIS_RETRIES="8")
    web = s.start_web()
    events = [samples.payment_events(rng)[2] for _ in range(60)]
    redis.config_resetstat()
    stop = threading.Event()

    def stall() -> None:
        while not stop.is_set():
            Redis(port=redis.connection_pool.connection_kwargs["port"]).execute_command(
                "DEBUG", "SLEEP", "0.6"
            )
            time.sleep(0.4)

    staller = threading.Thread(target=stall)
    staller.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda e: _status(web, samples.encode(e)), events * 3))
    finally:
        stop.set()
        staller.join()
    assert statuses == [200] * 180
    assert int(redis.hget(keys.STATS, "deliveries")) == 180
    assert all(redis.hget(keys.event(e["id"]), "n") == b"3" for e in events)
    assert redis.info("commandstats")["cmdstat_evalsha"]["calls"] > 180, "retries happened"


@pytest.mark.timeout(400)
def test_short_soak_loses_and_doubles_nothing(tmp_path) -> None:
    """The CI-sized soak: about 40 s of traffic with random faults, then the checker."""
    import subprocess
    import sys

    from tests.support.processes import ROOT

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
