"""Section 3's gevent variants: the drain's BatchWorker run under gevent
(bench/gevent_worker.py) beside the same worker on threads, and their ratios."""

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.common import spawn
from bench.drain import BATCH, BATCHES, SLOW_BATCH
from bench.stats import column, ratio_runs

GEVENT = "gevent:"
"""Worker class prefix: that class under ``bench.gevent_worker``."""
GEVENT_BATCH = GEVENT + BATCH
SLOW_GEVENT = f"{SLOW_BATCH} on gevent"
INSTANT_GEVENT = f"ours {BATCHES} on gevent"
NOOP_GEVENT = f"ours, no-op downstream, {BATCHES} on gevent"
RATIOS = {  # name: (gevent variant, the same on threads)
    "100 ms downstream BatchWorker gevent/threads": (SLOW_GEVENT, SLOW_BATCH),
    "BatchWorker gevent/threads": (INSTANT_GEVENT, f"ours {BATCHES}"),
    "no-op downstream BatchWorker gevent/threads": (
        NOOP_GEVENT,
        f"ours, no-op downstream, {BATCHES}",
    ),
}


def gevent_rq_worker(env: Mapping[str, str], worker_class: str) -> subprocess.Popen:
    """``rq worker`` as bench.common.rq_worker starts it (never in burst), under gevent."""
    argv = [sys.executable, "-m", "bench.gevent_worker", "rq", "worker"]
    argv += ["-w", worker_class.removeprefix(GEVENT), "-c", "workers.rq_config"]
    return spawn([*argv, "--logging_level", "WARNING"], env, None)


def os_threads(pid: int) -> int:
    """The process's OS threads now (greenlets are not counted: they share one)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def ratios(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """gevent against threads, each ratio whose two variants ran: payments/s and worker CPU
    per payment."""
    out: dict[str, Any] = {}
    for name, (a, b) in RATIOS.items():
        if a in runs and b in runs:
            out[name] = ratio_runs(column(runs[a], "rate"), column(runs[b], "rate"))
            out[name]["worker_cpu_us_per_job"] = ratio_runs(
                column(runs[a], "worker_cpu_us_per_job"), column(runs[b], "worker_cpu_us_per_job")
            )
    return out
