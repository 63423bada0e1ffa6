"""The Procfile runs without scripts/run.sh, as a platform or ``honcho start`` runs it: each
line read from the Procfile itself, with only the documented settings a deployment must
give (REDIS_URL, STRIPE_WEBHOOK_SECRET, OPS_TOKEN) and the platform's PORT; every other
value is a default inside the command or the program (the worker's queue, the downstream)."""

import os
import random
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from honcho.environ import parse_procfile
from redis import Redis

from ledger import keys
from ledger.read import payments
from tests.support.constants import BEARER, OPS_TOKEN, SECRET
from tests.support.helpers import deliver_live_payment
from tests.support.processes import BIN, ROOT, RedisServer, free_port, wait_for_port, wait_until

LINES = parse_procfile((ROOT / "Procfile").read_text()).processes


class Lines:
    """Procfile lines started as a platform starts them: ``sh -c LINE`` in the app's
    directory (here a copy: the default downstream is var/downstream.sqlite3 in it), each
    in its own process group, stopped by it."""

    def __init__(self, app_dir: Path, env: dict[str, str]) -> None:
        self.app_dir, self.env = app_dir, env
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str) -> subprocess.Popen:
        log = open(self.app_dir / f"{name}.log", "ab")
        proc = subprocess.Popen(
            ["/bin/sh", "-c", LINES[name]],
            cwd=self.app_dir,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.app_dir / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(15)


def app_dir(tmp_path: Path) -> Path:
    """What a platform's build has in its working directory (the code is installed)."""
    app = tmp_path / "app"
    app.mkdir()
    for name in ("Procfile", "gunicorn.conf.py", "config"):
        (app / name).symlink_to(ROOT / name)
    return app


@pytest.fixture
def lines(tmp_path: Path, redis: Redis, redis_server: RedisServer) -> Iterator[Lines]:
    env = {
        "PATH": f"{BIN}{os.pathsep}/usr/bin:/bin",  # the platform's build puts the app's bin first
        "REDIS_URL": redis_server.url,
        "STRIPE_WEBHOOK_SECRET": SECRET,
        "OPS_TOKEN": OPS_TOKEN,
        "PORT": str(free_port()),
        # Not needed (the platform's PORT listens on every interface, as gunicorn does by
        # default): the suite's rule is to listen on loopback only.
        "HOST": "127.0.0.1",
    }
    started = Lines(app_dir(tmp_path), env)
    yield started
    started.stop()


def test_web_and_worker_lines_fulfil_a_paid_payment_with_only_the_required_settings(
    lines: Lines, redis: Redis
) -> None:
    web = lines.start("web")
    lines.start("worker")
    lines.start("sweeper")
    port = int(lines.env["PORT"])
    wait_for_port(port, timeout=60, proc=web)
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: requests.get(f"{base}/readyz", timeout=5).ok, 60, what="/readyz")
    key = deliver_live_payment(base, random.Random(15))

    def fulfilled() -> bool:
        record = payments.payment(redis, key)
        return record is not None and record.state == "fulfilled"

    wait_until(fulfilled, 60, what=f"{key} fulfilled")
    downstream = lines.app_dir / "var" / "downstream.sqlite3"  # the default action
    with sqlite3.connect(downstream) as db:
        assert db.execute("SELECT payment_key FROM orders").fetchall() == [(key,)]
    assert "*** Listening on fulfilment" in lines.log("worker")  # QUEUE_NAME's default
    summary = requests.get(f"{base}/ops/api/summary", headers=BEARER, timeout=10).json()
    assert summary["payments_by_state"]["fulfilled"] == 1
    wait_until(lambda: redis.hget(keys.SWEEPER, "sweeps"), 30, what="a sweep")


def test_the_redis_line_runs_with_its_defaults_in_the_app_directory(tmp_path: Path) -> None:
    app = app_dir(tmp_path)
    port = free_port()
    env = {"PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "REDIS_PORT": str(port)}
    started = Lines(app, env)
    try:
        proc = started.start("redis")
        wait_for_port(port, proc=proc)
        assert Redis(port=port).ping()
        assert (app / "var" / "redis").is_dir()  # made by the line itself
    finally:
        started.stop()


HOLD_THE_LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("CREATE TABLE IF NOT EXISTS orders (payment_key TEXT PRIMARY KEY, token INTEGER)")
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()  # until the test says so
db.execute("COMMIT")
"""


def test_the_readmes_honcho_command_keeps_web_up_when_a_worker_is_ended(
    tmp_path: Path, redis: Redis, redis_server: RedisServer
) -> None:
    """``honcho start web worker sweeper`` (the README's command): a call stuck in C code
    (SQLite waiting for a lock another process holds) past its deadline ends its worker
    process (workers/deadline.py). honcho stops every process when one ends; the worker line
    starts its work again instead (workers/supervise.py), so web keeps answering Stripe and
    the next payment is fulfilled."""
    shop = tmp_path / "shop.sqlite3"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(shop)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    app = app_dir(tmp_path)
    port = free_port()
    env = {
        "PATH": f"{BIN}{os.pathsep}/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),  # the stubborn action is in tests/support
        "REDIS_URL": redis_server.url,
        "STRIPE_WEBHOOK_SECRET": SECRET,
        "OPS_TOKEN": OPS_TOKEN,
        "HOST": "127.0.0.1",
        "WEB_CONCURRENCY": "1",
        "FULFILMENT_ACTION": "tests.support.broken_actions:insert_order",
        "SHOP_DB": str(shop),
        "FULFILMENT_TIMEOUT": "1",
        "FULFILMENT_KILL_MARGIN_SECONDS": "0.5",
        "LEASE_SECONDS": "4",
    }
    log = app / "honcho.log"
    with open(log, "wb") as out:
        honcho = subprocess.Popen(
            [str(BIN / "honcho"), "start", "-p", str(port), "web", "worker", "sweeper"],
            cwd=app, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert honcho.poll() is None, log.read_text(errors="replace")
        try:
            return requests.get(f"{base}/readyz", timeout=5).ok
        except requests.ConnectionError:
            return False

    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        wait_until(up, 60, 0.2, what="/readyz")
        stuck = deliver_live_payment(base, random.Random(21))
        wait_until(lambda: "Timeout" in log.read_text(errors="replace"), 60, what="the watchdog")

        def interrupted() -> bool:
            assert honcho.poll() is None, log.read_text(errors="replace")  # web went too
            record = payments.payment(redis, stuck)
            return record is not None and record.state == "interrupted"

        wait_until(interrupted, 60, 0.2, what=f"{stuck} interrupted")
        holder.communicate(b"go\n", timeout=10)
        assert up()
        key = deliver_live_payment(base, random.Random(22))  # web still answers Stripe

        def fulfilled() -> bool:
            assert honcho.poll() is None, log.read_text(errors="replace")
            record = payments.payment(redis, key)
            return record is not None and record.state == "fulfilled"

        wait_until(fulfilled, 60, 0.2, what=f"{key} fulfilled by a new worker")
        with sqlite3.connect(shop) as db:
            assert db.execute("SELECT payment_key FROM orders").fetchall() == [(key,)]
        assert "its process ended with exit code 1; starting another" in log.read_text()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if honcho.poll() is None:
            honcho.send_signal(signal.SIGTERM)  # honcho stops every process it started
        try:
            honcho.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(honcho.pid, signal.SIGKILL)
            honcho.wait(30)
