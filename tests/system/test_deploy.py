"""Deployed as a platform deploys it: the repo's tracked files (no .venv) in a fresh
directory, the wheel built from them, a fresh venv with the runtime dependencies from
uv.lock and no dev group (docs/DEPLOYMENT.md's command), then the Procfile's web, worker
and sweeper under ``honcho start`` with only documented settings, against a Redis started
outside it: one redis-server (REDIS_URL), then a primary, two replicas and three Sentinels
(REDIS_SENTINELS, no REDIS_URL). A signed paid payment is fulfilled in each.

The venv is built once for the module (uv's cache makes it seconds, not minutes)."""

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from redis import Redis

from ledger.read import payments
from tests.support.constants import OPS_TOKEN, SECRET
from tests.support.ha import Cluster
from tests.support.helpers import deliver_live_payment
from tests.support.processes import BIN, ROOT, RedisServer, free_port, wait_until

PACKAGES = ("ledger", "ledgerctl", "webhook", "workers")
SERVICE = ("web", "worker", "sweeper")
STEP_TIMEOUT = 300
"""Seconds any one build or install step may take (a cold uv cache downloads the wheels)."""
pytestmark = pytest.mark.timeout(2 * STEP_TIMEOUT)  # the first test also builds the venv


@dataclass(frozen=True)
class Deployed:
    app: Path
    venv: Path
    wheel: Path


def uv(*args: str, cwd: Path, **env: str) -> str:
    done = subprocess.run(
        [str(BIN / "uv"), *args],
        cwd=cwd,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never", "VIRTUAL_ENV": "", **env},
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def tracked_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True
    ).stdout
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Deployed:
    base = tmp_path_factory.mktemp("deploy")
    app = base / "app"
    for name in tracked_files():
        (app / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, app / name)
    assert not (app / ".venv").exists()
    uv("build", "--wheel", "--out-dir", str(base / "dist"), cwd=app)
    (wheel,) = (base / "dist").glob("*.whl")
    venv = base / "venv"
    python = str(Path(sys.executable).resolve())
    uv("venv", "--python", python, str(venv), cwd=app)
    # The lock's runtime dependencies only (never re-resolved), then the built wheel itself.
    uv("sync", "--frozen", "--no-dev", "--no-install-project", cwd=app,
       UV_PROJECT_ENVIRONMENT=str(venv))  # fmt: skip
    uv("pip", "install", "--python", str(venv / "bin" / "python"), "--no-deps", str(wheel), cwd=app)
    return Deployed(app, venv, wheel)


def test_the_wheel_carries_every_file_of_the_packages(deployed: Deployed) -> None:
    """Lua, templates, static files, OpenAPI, the zstd dictionary, sample events..."""
    shipped = set(zipfile.ZipFile(deployed.wheel).namelist())
    needed = [name for name in tracked_files() if name.split("/")[0] in PACKAGES]
    assert [name for name in needed if name not in shipped] == []
    assert any(name.endswith(".lua") for name in needed)


def test_the_venv_has_the_locked_runtime_and_no_dev_tools(deployed: Deployed) -> None:
    bin_dir = deployed.venv / "bin"
    for program in ("gunicorn", "honcho", "webhook-ledger", "fulfilment-worker"):
        assert (bin_dir / program).exists(), program
    for tool in ("pytest", "mypy", "ruff"):
        assert not (bin_dir / tool).exists(), tool
    # Every module of the packages imports with the runtime alone, from the installed wheel
    # (run outside the app directory, so nothing comes from the source tree).
    done = subprocess.run(
        [str(bin_dir / "python"), "-c", IMPORT_ALL],
        cwd="/", env={"STRIPE_WEBHOOK_SECRET": SECRET},  # webhook.wsgi makes the app
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    imported, where = done.stdout.split()
    assert int(imported) > 50
    assert where.startswith(str(deployed.venv))  # installed, not the checkout's


IMPORT_ALL = f"""
import importlib, pkgutil
names = [m.name for top in {PACKAGES!r}
         for m in pkgutil.walk_packages(importlib.import_module(top).__path__, top + ".")]
for name in names:
    importlib.import_module(name)
print(len(names), importlib.import_module("ledger").__file__)
"""


def test_the_replay_script_runs_with_the_deploys_python(deployed: Deployed) -> None:
    """No .venv in the app directory: the script runs with the Python it is given, where
    the project is installed, instead of asking for scripts/bootstrap.sh."""
    done = subprocess.run(
        [str(deployed.venv / "bin" / "python"), "scripts/replay_events.py", "--help"],
        cwd=deployed.app, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and "--scenario" in done.stdout, done.stderr


class Honcho:
    """``honcho start web worker sweeper`` in the app directory, as a platform's runner."""

    def __init__(self, deployed: Deployed, settings: dict[str, str]) -> None:
        self.port = free_port()
        self.log = deployed.app / "honcho.log"
        env = {
            "PATH": f"{deployed.venv / 'bin'}{os.pathsep}/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/"),
            "STRIPE_WEBHOOK_SECRET": SECRET,
            "OPS_TOKEN": OPS_TOKEN,
            "HOST": "127.0.0.1",  # loopback only in tests; a platform listens on every interface
            "WEB_CONCURRENCY": "1",
            **settings,
        }
        argv = [str(deployed.venv / "bin" / "honcho"), "start", "-p", str(self.port), *SERVICE]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                argv, cwd=deployed.app, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # honcho stops every process it started
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture
def honcho(deployed: Deployed) -> Iterator:
    started: list[Honcho] = []

    def start(**settings: str) -> Honcho:
        running = Honcho(deployed, settings)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


def fulfils_a_paid_payment(running: Honcho, redis: Redis, app: Path, seed: int) -> None:
    base = f"http://127.0.0.1:{running.port}"

    def ready() -> bool:
        assert running.proc.poll() is None, running.output()
        try:
            return requests.get(f"{base}/readyz", timeout=5).ok
        except requests.ConnectionError:
            return False

    wait_until(ready, 120, 0.2, what="/readyz")
    key = deliver_live_payment(base, random.Random(seed))

    def fulfilled() -> bool:
        assert running.proc.poll() is None, running.output()
        record = payments.payment(redis, key)
        return record is not None and record.state == "fulfilled"

    wait_until(fulfilled, 120, 0.2, what=f"{key} fulfilled")
    with sqlite3.connect(app / "var" / "downstream.sqlite3") as db:  # the default action
        assert (key,) in db.execute("SELECT payment_key FROM orders").fetchall()
    assert f"Listening at: http://127.0.0.1:{running.port}" in running.output()


def test_the_procfile_under_honcho_with_one_redis(
    deployed: Deployed, honcho, tmp_path: Path
) -> None:
    redis = RedisServer(tmp_path / "redis").start()
    try:
        running = honcho(REDIS_URL=redis.url)
        with redis.client() as client:
            fulfils_a_paid_payment(running, client, deployed.app, seed=1)
    finally:
        redis.stop()


def test_the_procfile_under_honcho_with_sentinels_and_no_redis_url(
    deployed: Deployed, honcho, tmp_path: Path
) -> None:
    cluster = Cluster(tmp_path / "ha")
    try:
        cluster.start()
        running = honcho(**cluster.env)
        with cluster.client(cluster.primary()) as primary:
            fulfils_a_paid_payment(running, primary, deployed.app, seed=2)
        assert "127.0.0.1:6389" not in running.output()  # never the single-node default
    finally:
        cluster.close()
