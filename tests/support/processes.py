"""Real processes on free loopback ports: redis-server, gunicorn, RQ workers, the sweeper.

The one harness of the tests, the soak and the benchmarks; each starts what it needs and
stops it by PID.
"""

import functools
import itertools
import os
import random
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from redis import Redis

from tests.support.stopping import stop, stop_all

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


PORTS_FROM, PORTS_EACH = 20000, 3000
"""free_port's range: below Linux's ephemeral ports (32768-60999), so no outgoing connection
or ``bind(0)`` elsewhere takes one; a slice of it per pytest-xdist worker."""
_turn = itertools.count(random.randrange(PORTS_EACH))


@functools.cache
def shared_venv() -> Path:
    """This checkout's .venv, for a copy of the checkout to link to, first made current the
    way scripts/bootstrap.sh makes it here: a copy's own run.sh runs bootstrap through the
    link, and had this .venv been synced otherwise (``--group bench``) that bootstrap synced
    it again from the copy, installing the project from a folder about to be deleted."""
    subprocess.run([str(ROOT / "scripts" / "bootstrap.sh")], cwd=ROOT, check=True, timeout=600)
    return ROOT / ".venv"


def free_port() -> int:
    """A loopback port nobody holds, taken in turn (from a random start) in this worker's
    slice: a port a test freed (a server it killed) comes back only after thousands more, so
    the test never meets another test's server on it, nor a parallel worker's."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = PORTS_FROM + int(worker or 0) % 4 * PORTS_EACH
    for _ in range(PORTS_EACH):
        port = first + next(_turn) % PORTS_EACH
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {first}-{first + PORTS_EACH - 1}")


def serving_thread(server: socketserver.BaseServer) -> threading.Thread:
    """A daemon thread (not started) that serves ``server`` until its ``shutdown()``, which
    then returns within 50 ms: serve_forever's default poll of 0.5 s made every stop of a
    test's HTTP server wait 0.25 s on average (0.51 s for each test_gating case)."""
    return threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )


def wait_for_port(port: int, timeout: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def spawn(
    argv: list[str], env: Mapping[str, str], log: Path | None, cwd: Path = ROOT
) -> subprocess.Popen:
    """Start a process in the project root (or ``cwd``), its output appended to ``log``."""
    env = dict(env)
    if log is None:
        return subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=out)


class RedisServer:
    """A redis-server on a free port with the shipped config, data in ``workdir``."""

    def __init__(self, workdir: Path, port: int | None = None, extra: Iterable[str] = ()) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.extra = list(extra)  # more redis-server arguments, after the shipped config
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def client(self) -> Redis:
        """A plain client with a long timeout (for loading and reading, not the service)."""
        return Redis.from_url(self.url, socket_timeout=120)

    def start(self) -> "RedisServer":
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server not found: run scripts/bootstrap.sh")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                exe,
                str(ROOT / "config" / "redis.conf"),
                "--port",
                str(self.port),
                "--dir",
                str(self.workdir),
                "--daemonize",
                "no",
                "--logfile",
                "redis.log",
                "--enable-debug-command",
                "local",
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, proc=self.proc)
        return self

    def kill(self) -> None:
        if self.proc is not None:
            stop(self.proc, signal.SIGKILL)

    def stop(self) -> None:
        stop_all([self.proc], again=0.5)


def service_env(redis_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTPOINT")}
    env.update({"REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)})
    env.update(extra or {})
    return env


class Gunicorn:
    """A WSGI app (the web service unless told) under the shipped gunicorn.conf.py, on a free
    port; the worker class and threads as gunicorn.conf.py reads them. ``worker_class`` None:
    the class gunicorn.conf.py ships with. ``root``: a source tree to serve (another commit's,
    see bench/hostile.py); this checkout by default."""

    def __init__(
        self,
        env: Mapping[str, str],
        workers: int = 2,
        log: Path | None = None,
        app: str = "webhook.wsgi:app",
        worker_class: str | None = None,
        threads: int = 4,
        root: Path = ROOT,
    ) -> None:
        self.port = free_port()
        self.app = app
        self.root = root
        self.workers = workers
        self.env = {
            **env,
            "WEB_CONCURRENCY": str(workers),
            "WEB_PORT": str(self.port),
            "GUNICORN_THREADS": str(threads),
        }
        if worker_class is not None:
            self.env["GUNICORN_WORKER_CLASS"] = worker_class
        self.log = log
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Gunicorn":
        conf = str(self.root / "gunicorn.conf.py")
        # --chdir puts root first on the workers' sys.path, ahead of PYTHONPATH: its code runs.
        argv = [str(BIN / "gunicorn"), "-c", conf, "--chdir", str(self.root), self.app]
        self.proc = spawn(argv, self.env, self.log)
        wait_for_port(self.port, proc=self.proc)
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until every worker is forked and one answers (the master listens first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.worker_pids()) >= self.workers and self._answers():
                return
            time.sleep(0.05)
        raise TimeoutError(f"gunicorn on {self.port} not ready after {timeout}s")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=1):
                return True
        except urllib.error.HTTPError:  # an app without /healthz answered all the same
            return True
        except OSError:
            return False

    def worker_pids(self) -> list[int]:
        return children(self.proc.pid) if self.proc is not None else []

    def pids(self) -> list[int]:
        """The master and its workers (what a CPU measurement of the server counts)."""
        return [self.proc.pid, *self.worker_pids()] if self.proc is not None else []

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


class RqWorker:
    """``rq worker`` (SimpleWorker, as shipped) on the fulfilment queue, in its own process,
    started as the Procfile starts it."""

    def __init__(
        self,
        env: Mapping[str, str],
        log: Path | None = None,
        burst: bool = False,
        worker_class: str = "rq.worker.SimpleWorker",
        quiet: bool = False,
    ) -> None:
        self.env = env
        self.log = log
        self.burst = burst
        self.worker_class = worker_class
        self.quiet = quiet
        self.proc: subprocess.Popen | None = None

    def start(self) -> "RqWorker":
        # As the Procfile runs it: Redis and the queue from the settings (workers/rq_config.py,
        # which checks them and the fulfilment action first).
        argv = [str(BIN / "rq"), "worker", "-w", self.worker_class, "-c", "workers.rq_config"]
        argv += ["--burst"] if self.burst else []
        argv += ["--logging_level", "WARNING"] if self.quiet else []
        self.proc = spawn(argv, self.env, self.log)
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


class Sweeper:
    """``webhook-ledger sweep --loop`` in its own process."""

    def __init__(self, env: Mapping[str, str], log: Path | None = None) -> None:
        self.env = env
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Sweeper":
        self.proc = spawn([str(BIN / "webhook-ledger"), "sweep", "--loop"], self.env, self.log)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


def children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (read from /proc, no extra tools needed)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@dataclass(frozen=True)
class TcpSocket:
    """One row of /proc/net/tcp or /proc/net/tcp6."""

    local_port: int
    remote_port: int
    state: str
    """The kernel's hex code: "0A" listening, "01" established."""
    receive_queue: int
    """Bytes received that the owner has not read yet."""
    inode: int


def tcp_sockets() -> list[TcpSocket]:
    """This machine's TCP sockets, IPv4 and IPv6."""
    found = []
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        if not table.exists():  # IPv6 off
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            found.append(
                TcpSocket(
                    local_port=int(fields[1].rsplit(":", 1)[1], 16),
                    remote_port=int(fields[2].rsplit(":", 1)[1], 16),
                    state=fields[3],
                    receive_queue=int(fields[4].split(":")[1], 16),
                    inode=int(fields[9]),
                )
            )
    return found


def wait_until(predicate, timeout: float = 60.0, interval: float = 0.05, what: str = ""):
    """Poll ``predicate`` until it returns a truthy value; fail the test after ``timeout``
    (long: a wait that holds costs nothing, and a busy machine starts processes slowly)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
