"""Processes ``webhook-ledger prove-action`` starts on loopback and stops, each by its pid:
a scratch redis-server in a temporary folder, the prover's workers (ledgerctl/prove_worker.py)
and the sweeper. Every process runs in a session of its own, so a signal to the prover's
terminal reaches only the prover, which stops them itself."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError

STOP_SECONDS = 5.0
"""How long a stopped process has after SIGTERM before SIGKILL."""


def free_port() -> int:
    """A loopback port nobody listens on now (the kernel's choice)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Processes:
    """Every process the prover started, stopped together at the end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], env: Mapping[str, str], log: str) -> subprocess.Popen[bytes]:
        with open(self.folder / log, "ab") as out:
            proc = subprocess.Popen(
                argv, env=dict(env), stdout=out, stderr=out, start_new_session=True
            )
        self.started.append(proc)
        return proc

    def redis(self) -> str:
        """A scratch redis-server (no persistence: it lives as long as the run); its URL."""
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server not found on PATH")
        port = free_port()
        argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
        argv += ["--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"]
        proc = self.start(argv, {"PATH": os.environ.get("PATH", "")}, "redis.log")
        url = f"redis://127.0.0.1:{port}/0"
        client = Redis.from_url(url, socket_timeout=2)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                client.ping()
                return url
            except RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"the scratch redis-server did not answer on port {port}")

    def worker(self, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        return self.start([sys.executable, "-m", "ledgerctl.prove_worker"], env, "workers.log")

    def sweeper(self, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "ledgerctl.cli", "sweep", "--loop"]
        return self.start(argv, env, "sweeper.log")

    def stop(self, procs: list[subprocess.Popen[bytes]] | None = None) -> None:
        """SIGCONT and SIGTERM to each (a paused one too), one deadline, SIGKILL for the
        rest."""
        chosen = self.started if procs is None else procs
        for proc in chosen:
            if proc.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGTERM):
                    _send(proc, sig)
        deadline = time.monotonic() + STOP_SECONDS
        for proc in chosen:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                _send(proc, signal.SIGKILL)
                proc.wait()
        self.started = [p for p in self.started if p not in chosen]


def _send(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass
