"""Real processes for tests: redis-server, gunicorn and RQ workers on free loopback ports."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def stop(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Stop a process we started, by its PID; SIGKILL if it does not go in time."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def spawn(argv: list[str], env: Mapping[str, str], log: Path | None) -> subprocess.Popen:
    """Start a process in the project root, its output appended to ``log``."""
    env = dict(env)
    if log is None:
        return subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=out)


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
        if self.proc is not None:
            stop(self.proc)


def service_env(redis_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTPOINT")}
    env.update({"REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)})
    env.update(extra or {})
    return env


class Gunicorn:
    """The web service under the shipped gunicorn.conf.py, on a free port."""

    def __init__(self, env: dict[str, str], workers: int = 2, log: Path | None = None) -> None:
        self.port = free_port()
        self.env = {**env, "WEB_CONCURRENCY": str(workers), "WEB_PORT": str(self.port)}
        self.log = log
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Gunicorn":
        self.proc = spawn(
            [str(BIN / "gunicorn"), "-c", str(ROOT / "gunicorn.conf.py"), "webhook.wsgi:app"],
            self.env,
            self.log,
        )
        wait_for_port(self.port, proc=self.proc)
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Until a worker answers: the master listens before its workers have booted."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"gunicorn on {self.port} not ready after {timeout}s")

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


class RqWorker:
    """``rq worker`` (SimpleWorker, as shipped) on the fulfilment queue, in its own process."""

    def __init__(
        self,
        env: dict[str, str],
        log: Path | None = None,
        burst: bool = False,
        worker_class: str = "rq.worker.SimpleWorker",
    ) -> None:
        self.env = env
        self.log = log
        self.burst = burst
        self.worker_class = worker_class
        self.proc: subprocess.Popen | None = None

    def start(self) -> "RqWorker":
        argv = [
            str(BIN / "rq"),
            "worker",
            "-w",
            self.worker_class,
            "-u",
            self.env["REDIS_URL"],
        ]
        argv += ["--burst"] if self.burst else []
        self.proc = spawn([*argv, "fulfilment"], self.env, self.log)
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


class Sweeper:
    """``webhook-ledger sweep --loop`` in its own process."""

    def __init__(self, env: dict[str, str], log: Path | None = None) -> None:
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


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.05, what: str = ""):
    """Poll ``predicate`` until it returns a truthy value; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
