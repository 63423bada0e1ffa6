"""What every benchmark section shares: the processes (the test suite's harness,
tests/support/processes.py, with the benchmark's settings), work directories, result files,
the machine description and each section's command line. CPU: bench/cpu.py; statistics:
bench/stats.py. Every process is started here and stopped by PID, never by name.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ledger import keys
from ledger.stored import text
from tests.support import processes
from tests.support.processes import BIN, ROOT, Gunicorn, spawn, stop

__all__ = ["BIN", "ROOT", "Gunicorn", "spawn", "stop"]  # the harness, as sections use it

BENCH = ROOT / "bench"
RESULTS = ROOT / "var" / "bench"
"""Raw results and profiles (ignored by git); docs/BENCHMARKS.md keeps the tables."""
SECRET = "whsec_bench_0123456789abcdef0123456789abcdef"
SIMPLE = "rq.worker.SimpleWorker"
"""The worker class the Procfile runs."""
T = TypeVar("T")


def log(*parts: object) -> None:
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


class RedisServer(processes.RedisServer):
    """The shipped redis-server, with ``appendfsync`` / ``appendonly`` overridden when given."""

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


def service_env(redis_url: str, workdir: Path, extra: Mapping[str, str] | None = None) -> dict:
    """Environment of the web and worker processes under test."""
    return processes.service_env(
        redis_url,
        {
            "STRIPE_WEBHOOK_SECRET": SECRET,
            "STRIPE_MODE": "test",  # the generated events are test-mode payloads
            "FULFILMENT_ACTION": f"sqlite:///{workdir / 'downstream.sqlite3'}",
            "PYTHONDONTWRITEBYTECODE": "1",
            **(extra or {}),
        },
    )


def rq_worker(
    env: Mapping[str, str], worker_class: str = SIMPLE, burst: bool = True
) -> subprocess.Popen:
    """``rq worker`` as the Procfile runs it (SimpleWorker), or another worker class."""
    worker = processes.RqWorker(env, burst=burst, worker_class=worker_class, quiet=True).start()
    assert worker.proc is not None
    return worker.proc


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


class Stack(ExitStack):
    """ExitStack that stops every process registered with it, last started first."""

    def start(self, thing: T) -> T:
        thing.start()  # type: ignore[attr-defined]
        self.callback(thing.stop)  # type: ignore[attr-defined]
        return thing

    def popen(self, proc: subprocess.Popen) -> subprocess.Popen:
        self.callback(stop, proc)
        return proc


def write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


def section_main(name: str, run: Callable[[bool], dict[str, Any]], argv: list[str] | None) -> int:
    """``python -m bench.<name> [--quick] [--out FILE]``: one section, its JSON written."""
    p = argparse.ArgumentParser(description=f"Benchmark section: {name}")
    p.add_argument("--quick", action="store_true", help="fewer and shorter runs")
    p.add_argument("--out", type=Path, default=RESULTS / f"{name}.json")
    args = p.parse_args(argv)
    write_json(args.out, run(args.quick))
    log(f"wrote {args.out}")
    return 0


def payment_states(client: Any) -> dict[str, int]:
    """Payments per state, from the ledger's own counters."""
    return {text(k): int(v) for k, v in client.hgetall(keys.PAYMENT_STATE_COUNTS).items()}


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
