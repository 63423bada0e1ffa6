"""Load runs against one server: peak (closed loop, wrk) and paced (open loop, fixed rate).

Each run returns throughput, latency percentiles and CPU per request of the server
(gunicorn master + workers), of Redis and of the load generator itself, measured from
/proc over the run.
"""

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.common import BENCH, ROOT, Gunicorn
from bench.cpu import CpuMeter
from bench.events import Pool
from bench.stats import column, spread

WRK_LUA = BENCH / "wrk_pool.lua"
PATH = "/webhooks/stripe"

METRICS = (
    "rps",
    "p50_ms",
    "p99_ms",
    "server_cpu_us_per_req",
    "redis_cpu_us_per_req",
    "loadgen_cpu_us_per_req",
    "loadgen_cores",
    "other_cores",
)


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    return {name: {m: spread(column(rs, m)) for m in METRICS} for name, rs in runs.items()}


def run_measured(argv: list[str], timeout: float, env: Mapping[str, str] | None = None):
    """Run a load generator to completion: (stdout, stderr, wall s, its CPU s, exit code).

    Its CPU is the RUSAGE_CHILDREN delta: nothing else this process started is reaped
    while it runs (servers and workers are still up).
    """
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


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def _last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON result in load generator output: {text[-500:]!r}")


def peak(
    port: int,
    server_pids: Callable[[], list[int]],
    redis_pid: int | None,
    pool: Path,
    duration: float,
    connections: int = 16,
) -> dict[str, Any]:
    """Closed-loop maximum throughput: ``connections`` clients sending back to back."""
    meter = CpuMeter({"server": server_pids, "redis": lambda: [redis_pid] if redis_pid else []})
    url = f"http://127.0.0.1:{port}{PATH}"
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s"]  # whole seconds
    argv += ["--timeout", "10s", "-s", str(WRK_LUA), url]
    env = {**os.environ, "WLBENCH_POOL": str(pool)}
    meter.start()
    out, err, wall, gen_cpu, rc = run_measured(argv, timeout=duration + 90, env=env)
    cpu = meter.stop()
    if rc != 0:
        raise RuntimeError(f"load generator failed ({rc}): {err[-1000:]}")
    data = _last_json(out)
    n = data["requests"]
    errors = {k: data[k] for k in ("connect", "read", "write", "status", "timeout") if data[k]}
    lat = {k: data[f"{k}_us"] / 1000 for k in ("p50", "p90", "p99", "max")}
    return _result(n, data["duration_us"] / 1e6, errors, lat, cpu, gen_cpu, "wrk")


def warm_up(server: Gunicorn, pool: Pool) -> None:
    """One unmeasured second of peak load: imports, connections and caches are warm after."""
    peak(server.port, server.pids, None, pool.fresh(), 1.0)


def paced(
    port: int,
    server_pids: Callable[[], list[int]],
    redis_pid: int | None,
    pool: Path,
    rate: float,
    duration: float,
    max_conns: int = 64,
) -> dict[str, Any]:
    """Open-loop fixed rate: latency measured from each request's due time."""
    meter = CpuMeter({"server": server_pids, "redis": lambda: [redis_pid] if redis_pid else []})
    argv = [sys.executable, "-m", "bench.paced", "--pool", str(pool), "--port", str(port)]
    argv += ["--rate", f"{rate:.1f}", "--duration", f"{duration:g}"]
    argv += ["--max-conns", str(max_conns)]
    meter.start()
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
    out, err, wall, gen_cpu, rc = run_measured(argv, timeout=duration + 90, env=env)
    cpu = meter.stop()
    if rc != 0:
        raise RuntimeError(f"paced load generator failed ({rc}): {err[-1000:]}")
    data = _last_json(out)
    errors = dict(data["errors"])
    bad = sum(v for k, v in data["statuses"].items() if not k.startswith("2"))
    if bad:
        errors["status"] = bad
    lat = {k: data[f"{k}_ms"] for k in ("p50", "p90", "p99", "max")}
    result = _result(data["completed"], duration, errors, lat, cpu, gen_cpu, "python-paced")
    result["target_rate"] = rate
    result["achieved_rate"] = data["achieved_rate"]
    return result


def _result(
    n: int,
    secs: float,
    errors: dict[str, int],
    lat: dict[str, float],
    cpu: dict[str, float],
    gen_cpu: float,
    generator: str,
) -> dict[str, Any]:
    per = 1e6 / n if n else float("nan")
    return {
        "requests": n,
        "seconds": round(secs, 3),
        "rps": n / secs if secs else 0.0,
        "p50_ms": lat["p50"],
        "p90_ms": lat["p90"],
        "p99_ms": lat["p99"],
        "max_ms": lat["max"],
        "errors": sum(errors.values()),
        "error_detail": errors,
        "server_cpu_us_per_req": cpu["server"] * per,
        "redis_cpu_us_per_req": cpu["redis"] * per,
        "loadgen_cpu_us_per_req": gen_cpu * per,
        "server_cores": cpu["server"] / secs if secs else 0.0,
        "redis_cores": cpu["redis"] / secs if secs else 0.0,
        "loadgen_cores": gen_cpu / secs if secs else 0.0,
        # Busy CPU of everything else on the machine during the run (other users'
        # processes; for a quiet machine this is ~0): a noisy-run indicator.
        "other_cores": max(0.0, cpu["machine"] - cpu["server"] - cpu["redis"] - gen_cpu) / secs
        if secs
        else 0.0,
        "generator": generator,
    }
