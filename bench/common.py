"""Shared pieces of the benchmarks: processes on free loopback ports, CPU accounting,
run alternation, statistics and result files.

Everything here starts processes itself and stops them by PID (never by name). The
process helpers mirror tests/processes.py but are kept here so the benchmarks do not
depend on the test suite's internals.
"""

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
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
from tests import processes  # noqa: E402
from tests.processes import free_port, spawn, stop, wait_for_port  # noqa: E402, F401


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

    def client(self):  # noqa: ANN201
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


def rq_worker(
    env: Mapping[str, str],
    worker_class: str = "rq.worker.SimpleWorker",
    queue: str = "fulfilment",
    burst: bool = True,
    logfile: Path | None = None,
) -> subprocess.Popen:
    """``rq worker`` as the Procfile runs it (SimpleWorker), or another worker class."""
    argv = [str(BIN / "rq"), "worker", "-w", worker_class, "-u", env["REDIS_URL"]]
    argv += ["--burst"] if burst else []
    argv += ["--logging_level", "WARNING", queue]
    return spawn(argv, env, logfile)


# ---------------------------------------------------------------------------- CPU


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, CPU ticks of it and its reaped children) of a live process, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2 :].split()
    # utime + stime + cutime + cstime: a forking RQ worker's horses are reaped by it.
    return int(rest[1]), int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                children.setdefault(st[0], []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds so far of these (live) processes, all their threads."""
    total = 0
    for pid in pids:
        st = _stat(pid)
        if st is not None:
            total += st[1]
    return total / TICKS


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (all cores, all processes)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / TICKS


class CpuMeter:
    """CPU seconds used by named process groups between start() and stop(), plus
    ``machine``: the whole machine's busy CPU seconds over the same interval (so the
    CPU used by processes this harness did not start can be reported)."""

    def __init__(self, groups: Mapping[str, Callable[[], list[int]]]) -> None:
        self.groups = groups
        self.before: dict[str, float] = {}

    def start(self) -> None:
        self.before = {name: cpu_seconds(get()) for name, get in self.groups.items()}
        self.before["machine"] = machine_busy()

    def stop(self) -> dict[str, float]:
        out = {name: cpu_seconds(get()) - self.before[name] for name, get in self.groups.items()}
        out["machine"] = machine_busy() - self.before["machine"]
        return out


def run_measured(argv: list[str], timeout: float, env: Mapping[str, str] | None = None):  # noqa: ANN201
    """Run a load generator to completion: (stdout, stderr, wall s, its CPU s, exit code).

    Its CPU is the RUSAGE_CHILDREN delta: nothing else this process started is reaped
    while it runs (servers and workers are still up).
    """
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=dict(env) if env is not None else None,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"{argv[0]} did not finish in {timeout}s") from None
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out.decode(), err.decode(), wall, cpu, proc.returncode


# ---------------------------------------------------------------------------- statistics


def median(values: Iterable[float]) -> float:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else float("nan")


def spread(values: Iterable[float]) -> dict[str, Any]:
    """Median, min, max and the relative range ((max - min) / median) of repeated runs."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    med = statistics.median(vals)
    return {
        "median": med,
        "min": min(vals),
        "max": max(vals),
        "rel_range": (max(vals) - min(vals)) / med if med else float("nan"),
        "n": len(vals),
        "runs": vals,
    }


def ratio_runs(a: list[float], b: list[float]) -> dict[str, Any]:
    """Ratio of medians, plus the spread of the paired per-round ratios a[i] / b[i]."""
    paired = [x / y for x, y in zip(a, b, strict=False) if x is not None and y]
    out = spread(paired)
    out["ratio_of_medians"] = median(a) / median(b) if median(b) else float("nan")
    return out


def alternate(
    variants: Mapping[str, Callable[[int], dict[str, Any]]],
    runs: int,
    between: Callable[[], None] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Run every variant once per round, A B C A B C ..., ``runs`` rounds."""
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for round_no in range(runs):
        for name, fn in variants.items():
            if between is not None:
                between()
            result = fn(round_no)
            results[name].append(result)
            log(f"  round {round_no + 1}/{runs} {name}: {short(result)}")
    return results


def short(result: Mapping[str, Any]) -> str:
    keys = ("rps", "p50_ms", "p99_ms", "rate", "us_per_call", "errors")
    return " ".join(
        f"{k}={result[k]:.4g}" if isinstance(result.get(k), float) else f"{k}={result[k]}"
        for k in keys
        if k in result
    )


def column(results: list[dict[str, Any]], key: str) -> list[float]:
    return [r[key] for r in results if r.get(key) is not None]


def target(name: str, measured: float, goal: float, higher_is_better: bool, why: str = "") -> dict:
    met = measured >= goal if higher_is_better else measured <= goal
    return {
        "target": name,
        "measured": round(measured, 3),
        "goal": ("≥ " if higher_is_better else "≤ ") + f"{goal:g}",
        "met": bool(met),
        "why": why,
    }


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

    def start(self, thing):  # noqa: ANN001, ANN201
        thing.start()
        self.callback(thing.stop)
        return thing

    def popen(self, proc: subprocess.Popen) -> subprocess.Popen:
        self.callback(stop, proc)
        return proc


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]
