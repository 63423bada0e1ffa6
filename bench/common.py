"""Shared pieces of the benchmarks: processes on free loopback ports, work directories,
result files and the machine description (CPU: bench/cpu.py; statistics: bench/stats.py).

Everything here starts processes itself and stops them by PID (never by name). The
process helpers mirror tests/processes.py but are kept here so the benchmarks do not
depend on the test suite's internals.
"""

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
BIN = Path(sys.executable).parent
SECRET = "whsec_bench_0123456789abcdef0123456789abcdef"
TICKS = os.sysconf("SC_CLK_TCK")


def log(*parts: object) -> None:
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- processes


# The same helpers the tests use to start and stop real processes.
from bench.cpu import descendants  # noqa: E402
from ledger import keys  # noqa: E402
from ledger.queries import text  # noqa: E402
from tests.support import processes  # noqa: E402
from tests.support.processes import free_port, spawn, stop, wait_for_port  # noqa: E402


class RedisServer(processes.RedisServer):
    """The tests' redis-server (shipped config, free port), with the benchmark's overrides.

    ``appendfsync`` / ``appendonly`` override the shipped durability settings for the
    comparisons that need it; ``None`` keeps the shipped value.
    """

    def __init__(
        self,
        workdir: Path,
        appendfsync: str | None = None,
        appendonly: str | None = None,
        extra: Iterable[str] = (),
    ) -> None:
        overrides = ["--appendfsync", appendfsync] if appendfsync else []
        overrides += ["--appendonly", appendonly] if appendonly else []
        super().__init__(workdir, extra=[*overrides, *extra])

    def client(self):
        from redis import Redis

        return Redis.from_url(self.url, socket_timeout=120)


def service_env(redis_url: str, workdir: Path, extra: Mapping[str, str] | None = None) -> dict:
    """Environment of the web and worker processes under test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTPOINT")}
    env.update(
        {
            "REDIS_URL": redis_url,
            "PYTHONPATH": str(ROOT),
            "STRIPE_WEBHOOK_SECRET": SECRET,
            "STRIPE_MODE": "test",  # the generated events are test-mode payloads
            "FULFILMENT_ACTION": f"sqlite:///{workdir / 'downstream.sqlite3'}",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    env.update(extra or {})
    return env


class Gunicorn:
    """A WSGI app under the shipped gunicorn.conf.py on a free loopback port."""

    def __init__(
        self,
        env: Mapping[str, str],
        app: str = "webhook.wsgi:app",
        workers: int = 2,
        worker_class: str = "gthread",
        threads: int = 4,
        logfile: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.app = app
        # gunicorn.conf.py makes a Prometheus multiprocess directory in /tmp unless one
        # is given: give each server its own, next to its log, so nothing is left behind.
        prom = {}
        if logfile is not None:
            prom_dir = logfile.parent / f"prometheus-{self.port}"
            prom_dir.mkdir(parents=True, exist_ok=True)
            prom = {"PROMETHEUS_MULTIPROC_DIR": str(prom_dir)}
        self.env = {
            **env,
            **prom,
            "WEB_CONCURRENCY": str(workers),
            "WEB_PORT": str(self.port),
            "HOST": "127.0.0.1",
            "GUNICORN_WORKER_CLASS": worker_class,
            "GUNICORN_THREADS": str(threads),
        }
        self.workers = workers
        self.logfile = logfile
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Gunicorn":
        argv = [str(BIN / "gunicorn"), "-c", str(ROOT / "gunicorn.conf.py"), self.app]
        self.proc = spawn(argv, self.env, self.logfile)
        wait_for_port(self.port, proc=self.proc)
        # The port is bound by the master before the workers have imported the app.
        deadline = time.monotonic() + 30
        while len(descendants(self.proc.pid)) < self.workers and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def pids(self) -> list[int]:
        assert self.proc is not None
        return [self.proc.pid, *descendants(self.proc.pid)]

    def worker_pids(self) -> list[int]:
        assert self.proc is not None
        return descendants(self.proc.pid)

    def stop(self) -> None:
        stop(self.proc)


SIMPLE = "rq.worker.SimpleWorker"
"""The worker class the Procfile runs."""


def rq_worker(
    env: Mapping[str, str],
    worker_class: str = SIMPLE,
    queue: str = "fulfilment",
    burst: bool = True,
    logfile: Path | None = None,
) -> subprocess.Popen:
    """``rq worker`` as the Procfile runs it (SimpleWorker), or another worker class."""
    argv = [str(BIN / "rq"), "worker", "-w", worker_class, "-u", env["REDIS_URL"]]
    argv += ["--burst"] if burst else []
    argv += ["--logging_level", "WARNING", queue]
    return spawn(argv, env, logfile)


# ---------------------------------------------------------------------------- files


@dataclass
class Workdir:
    path: Path

    @classmethod
    def make(cls, name: str) -> "Workdir":
        # On the same disk as the project (fsync costs are real), never a tmpfs.
        base = Path(os.environ.get("BENCH_WORKDIR", tempfile.gettempdir()))
        return cls(Path(tempfile.mkdtemp(prefix=f"wlbench-{name}-", dir=base)))

    def sub(self, name: str) -> Path:
        p = self.path / name
        p.mkdir(parents=True, exist_ok=True)
        return p

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


def _cmd(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    pkgs: dict[str, str | None] = {}
    for name in ("flask", "gunicorn", "gevent", "redis", "hiredis", "rq", "stripe", "orjson"):
        try:
            pkgs[name] = version(name)
        except PackageNotFoundError:
            pkgs[name] = None
    fs = _cmd(["df", "-T", tempfile.gettempdir()]).splitlines()
    return {
        "nproc": _cmd(["nproc"]),
        "lscpu": _cmd(["lscpu"]).splitlines()[:15],
        "memory": _cmd(["free", "-h"]).splitlines()[1:2],
        "kernel": platform.release(),
        "python": platform.python_version(),
        "redis": _cmd(["redis-server", "--version"]),
        "wrk": (_cmd(["sh", "-c", "wrk -v 2>&1 | head -1"]) or None),
        "packages": pkgs,
        "workdir_fs": fs[-1] if fs else "",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "git": _cmd(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
        "git_dirty": bool(_cmd(["git", "-C", str(ROOT), "status", "--porcelain"])),
    }


class Stack(ExitStack):
    """ExitStack that stops every process registered with it, last started first."""

    def start(self, thing):
        thing.start()
        self.callback(thing.stop)
        return thing

    def popen(self, proc: subprocess.Popen) -> subprocess.Popen:
        self.callback(stop, proc)
        return proc


def payment_states(client) -> dict[str, int]:
    """Payments per state, from the ledger's own counters."""
    return {text(k): int(v) for k, v in client.hgetall(keys.PAYMENT_STATES).items()}
