"""Does the hard deadline (workers/deadline.py) hold under gevent? A probe, not a test.

    .venv/bin/python bench/probes/gevent_deadline.py

Runs the same scene once on threads and once after ``gevent.monkey.patch_all()``, each in a
process of its own: one call in flight ticks every 0.1 s (a cooperative call, 30 s
deadline), then a second call blocks inside C code, SQLite's busy wait on a database
another connection holds locked, far longer than its own deadline (0.5 s, the process
ended 0.5 s after that). Both calls run through ``call_within`` in threads, as the
BatchWorker's slots do. Prints, per mode, the process's exit code, when it ended and how
many ticks the other call made while the stuck one ran.
"""

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 0.5
KILL_AFTER_S = 0.5
STUCK_S = 10.0
"""SQLite's busy timeout in the stuck call: how long it would wait if nothing ended it."""


def scene(mode: str) -> None:
    if mode == "gevent":
        from gevent import monkey

        monkey.patch_all()
    import sqlite3
    import tempfile
    import threading

    sys.path.insert(0, str(ROOT))
    from workers.deadline import call_within

    path = str(Path(tempfile.mkdtemp(prefix="gevent-deadline-")) / "locked.sqlite3")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    began = time.monotonic()

    def ticks() -> None:
        while True:
            print(f"tick {time.monotonic() - began:.2f}", flush=True)
            time.sleep(0.1)

    def stuck() -> None:
        sqlite3.connect(path, timeout=STUCK_S).execute("INSERT INTO t VALUES (1)")

    threading.Thread(target=lambda: call_within(30, ticks, 1), daemon=True).start()
    time.sleep(0.3)
    print(f"stuck {time.monotonic() - began:.2f}", flush=True)
    slot = threading.Thread(target=lambda: call_within(DEADLINE_S, stuck, KILL_AFTER_S))
    slot.start()
    slot.join()
    print("the stuck call returned", flush=True)


def watch(mode: str) -> str:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, __file__, mode], capture_output=True, text=True, timeout=60
    )
    ended = time.monotonic() - began
    lines = done.stdout.splitlines()
    stuck_at = next(float(x.split()[1]) for x in lines if x.startswith("stuck"))
    ticks_while_stuck = sum(
        1 for x in lines if x.startswith("tick") and float(x.split()[1]) > stuck_at
    )
    timeout = "Timeout" in done.stderr
    return (
        f"{mode}: exit {done.returncode} after {ended:.2f} s (stuck call began at "
        f"{stuck_at:.2f} s, its deadline {DEADLINE_S} s, process ended "
        f"{KILL_AFTER_S} s later), watchdog traceback: {timeout}, ticks of the other "
        f"call while it was stuck: {ticks_while_stuck}"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1:
        scene(sys.argv[1])
    else:
        for m in ("threads", "gevent"):
            print(watch(m))
