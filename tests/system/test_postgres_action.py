"""The PostgreSQL action with real processes: gunicorn, RQ workers, the sweeper and a real
PostgreSQL server (tests/support/postgres.py) as the user's database. Workers SIGKILLed
every second and the postmaster killed once, a call blocked on another session's row lock,
and the worker's refusal to start on each wrong setting."""

import json
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from ledger.read import payments as read_payments
from ledgerctl import samples
from tests.support.helpers import state_of
from tests.support.postgres import (
    ORDER_SQL,
    USER_PASSWORD,
    PostgresServer,
    make_shop,
    orders_per_payment,
)
from tests.support.processes import BIN, ROOT, free_port, wait_until
from tests.support.storm import Storm, deliveries
from workers import postgres_schema

WORKER = [str(BIN / "rq"), "worker", "-w", "rq.worker.SimpleWorker", "-c", "workers.rq_config"]


def shop_database(url: str) -> str:
    """The shop's orders table and a stock row to lock, and the service's table."""
    make_shop(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE stock (item text PRIMARY KEY, sold int NOT NULL)")
        conn.execute("INSERT INTO stock VALUES ('book', 0)")
    return url


def pk_of(events: list[dict]) -> str:
    return str(events[0]["data"]["object"]["id"])


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A server of this test's own: it is killed."""
    server = PostgresServer().start()
    yield server
    server.remove()


@pytest.mark.timeout(400)
def test_storm_with_workers_and_the_postmaster_killed(stack, redis, own_postgres) -> None:
    """200 payments; a worker SIGKILLed (and replaced) every second throughout, the
    postmaster kill -9'd once the first third are fulfilled, the other two thirds delivered
    while it is down and until it is started again: every payment fulfilled, one order row
    each, none interrupted. Ordered by progress, not time: the kill falls between the thirds
    however fast the machine is."""
    url = shop_database(own_postgres.database("shop"))
    rng = random.Random(41)
    s = stack(
        FULFILMENT_ACTION=url,
        FULFILMENT_SQL=ORDER_SQL,
        MAX_ATTEMPTS="1000",  # each kill mid-call and each outage second spends attempts
        BREAKER_COOLDOWN_SECONDS="0.5",
    )
    web = s.start_web()
    workers = [s.start_worker() for _ in range(3)]
    s.start_sweeper()
    paid = [samples.payment_events(rng, checkout=bool(i % 2)) for i in range(200)]
    keys = [pk_of(events) for events in paid]
    third = len(paid) // 3
    secret = s.env["STRIPE_WEBHOOK_SECRET"].split(",")[0]
    first = Storm(web.url, deliveries(rng, paid[:third]), secret)
    rest = Storm(web.url, deliveries(rng, paid[third:]), secret)
    done = threading.Event()
    kills = {"workers": 0}

    def fulfilled(among: list[str]) -> int:
        return sum(state_of(redis, pk) == "fulfilled" for pk in among)

    def killer() -> None:
        while not done.wait(1.0):
            victim = workers.pop(rng.randrange(len(workers)))
            victim.signal(9)
            assert victim.proc is not None
            victim.proc.wait(10)
            kills["workers"] += 1
            workers.append(s.start_worker())

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        first.start()
        wait_until(lambda: fulfilled(keys[:third]) == third, 300, 0.2, what="a third fulfilled")
        own_postgres.kill()
        rest.start()
        wait_until(lambda: kills["workers"] >= 2, 60, 0.2, what="workers killed while down")
        own_postgres.start()
        wait_until(lambda: fulfilled(keys) == len(keys), 300, 0.5, what="every payment fulfilled")
    finally:
        done.set()
        thread.join(60)
    first.join()
    rest.join()
    assert fulfilled(keys[third:]) == len(keys) - third
    assert first.unanswered() == [] and rest.unanswered() == []
    assert not [pk for pk in keys if state_of(redis, pk) != "fulfilled"]
    assert orders_per_payment(url) == dict.fromkeys(keys, 1)


def test_a_call_blocked_on_a_row_lock_ends_in_the_database(stack, redis, postgres_url) -> None:
    """Another session holds the row the effect updates: PostgreSQL's lock_timeout ends the
    call inside FULFILMENT_TIMEOUT (1 s here; no process is killed), the payment retries, and
    once the lock is let go it is fulfilled once."""
    url = shop_database(postgres_url)
    s = stack(
        FULFILMENT_ACTION=url,
        FULFILMENT_SQL="UPDATE stock SET sold = sold + 1 WHERE item = 'book' RETURNING sold",
        MAX_ATTEMPTS="50",
    )
    s.start_web()
    worker = s.start_worker()
    s.start_sweeper()
    events = samples.payment_events(random.Random(7))
    pk = pk_of(events)
    holder = psycopg.connect(url)
    holder.execute("SELECT * FROM stock WHERE item = 'book' FOR UPDATE")
    try:
        assert s.send(samples.encode(events[2])).status_code == 200

        def blocked() -> bool:
            record = read_payments.payment(redis, pk)
            return record is not None and "lock timeout" in (record.last_error or "")

        wait_until(blocked, timeout=30, what="a call ended by lock_timeout")
    finally:
        holder.rollback()
        holder.close()
    wait_until(lambda: state_of(redis, pk) == "fulfilled", timeout=30, what="fulfilled")
    record = read_payments.payment(redis, pk)
    assert record is not None and record.receipt == {
        "outcome": "applied",
        "receipt": {"sold": 1, "rowcount": 1},
    }
    timed_out = [a for a in record.attempts if "lock timeout" in (a.error or "")]
    assert timed_out and all(a.call_ms is not None and a.call_ms < 1000 for a in timed_out)
    assert worker.proc is not None and worker.proc.poll() is None  # never killed
    assert "Timeout" not in (Path(s.logs) / "worker.log").read_text()  # no watchdog dump
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT sold FROM stock").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM webhook_ledger_effects").fetchone() == (1,)


def refusal(env: dict[str, str]) -> list[str]:
    done = subprocess.run(WORKER, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, lines)
    return lines


@pytest.mark.parametrize(
    ("case", "setting", "words"),
    [
        ("no table", "FULFILMENT_ACTION", "webhook_ledger_effects is missing"),
        ("wrong password", "FULFILMENT_ACTION", "password authentication failed"),
        ("unreachable", "FULFILMENT_ACTION", "Connection refused"),
        ("bad sql", "FULFILMENT_SQL", 'syntax error at or near "INTO"'),
        ("no module", "FULFILMENT_EFFECT", "No module named 'shop_nowhere'"),
    ],
)
def test_the_worker_refuses_a_wrong_setting_in_one_line(
    postgres_url, config, case, setting, words
) -> None:
    url = postgres_url
    if case != "no table":
        postgres_schema.migrate(url)
    extra: dict[str, str] = {}
    if case == "wrong password":
        url = url.replace(USER_PASSWORD, "Not-The-Pw-77")
    if case == "unreachable":
        url = url.replace(url.rsplit(":", 1)[1].split("/")[0], str(free_port()))
    if case == "bad sql":
        extra["FULFILMENT_SQL"] = "INSERT INTO INTO shop_orders VALUES (%(amount)s)"
    if case == "no module":
        extra["FULFILMENT_EFFECT"] = "shop_nowhere.effects:grant"
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    env |= {"REDIS_URL": str(config["REDIS_URL"]), "FULFILMENT_ACTION": url, **extra}
    (line,) = refusal(env)
    assert line.startswith(f"invalid setting {setting}=") and words in line, line
    assert USER_PASSWORD not in line and "Not-The-Pw-77" not in line


@pytest.mark.timeout(400)
def test_short_soak_with_the_postgresql_action(tmp_path) -> None:
    """scripts/soak.py --postgres: 40 s of traffic with random faults and the postmaster
    kill -9'd once, then the checker, effects counted in the user's own table."""
    out = tmp_path / "soak.json"
    argv = [sys.executable, str(ROOT / "scripts" / "soak.py"), "--postgres", "--duration", "40"]
    argv += ["--fault-interval", "3", "--settle", "120", "--workdir", str(tmp_path / "soak")]
    proc = subprocess.run([*argv, "--json", str(out)], capture_output=True, timeout=340)
    result = json.loads(out.read_text())
    assert proc.returncode == 0, result["findings"]
    assert result["faults"]["postmaster_kill"] == 1 and result["faults_total"] >= 8
    assert (result["lost"], result["duplicated"], result["findings"]["unfulfilled"]) == (0, 0, [])
    # Refunded before its fulfilment: never called; after an attempt that may have applied,
    # settled by the action (its key found: fulfilled; absent: voided), never held for a
    # person (REVERSAL_ACTION is unset here: a payment refunded after it stays fulfilled).
    assert set(result["states"]) <= {"fulfilled", "refunded_unfulfilled"}, result["held_reasons"]
    settled = result["settlements"]
    assert settled["settles_due"] == settled["settled_voided"] + settled["settled_applied"]
    assert result["reversals"]["ok"] and result["reversals"]["reversed"] == 0
