"""workers/supervise.py with real processes: a child that ends unasked is started again, a
stop signal reaches the child once (also when sent to the supervisor's whole group, as
honcho sends it) and ends both, and a supervisor killed outright takes its child along."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import ROOT, wait_until

SUPERVISED = """
import os, signal, sys, time
from pathlib import Path
from workers import supervise
supervise.RESTART_SECONDS = 0.05
runs = Path(sys.argv[1])

def work():
    run = len(runs.read_text().splitlines()) if runs.exists() else 0
    with runs.open("a") as out:
        out.write(f"{os.getpid()}\\n")
    if run < 2:
        os._exit(1)  # as the deadline's watchdog ends a worker
    signals = []
    signal.signal(signal.SIGTERM, lambda signum, frame: signals.append(signum))
    while not signals:
        time.sleep(0.01)
    time.sleep(0.2)  # a second SIGTERM, if any came, would be counted now
    Path(sys.argv[2]).write_text(str(len(signals)))
    return 0

sys.exit(supervise.supervise("test", work))
"""


def start(tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    runs, stopped = tmp_path / "runs", tmp_path / "stopped"
    with open(tmp_path / "stderr", "wb") as errors:
        proc = subprocess.Popen(
            [sys.executable, "-c", SUPERVISED, str(runs), str(stopped)],
            cwd=ROOT, start_new_session=True, stderr=errors,
        )  # fmt: skip
    return proc, runs, stopped


def children(runs: Path) -> list[int]:
    return [int(pid) for pid in runs.read_text().split()] if runs.exists() else []


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("to_group", [False, True], ids=["to-the-process", "to-its-group"])
def test_a_child_that_ends_unasked_is_started_again_and_a_stop_reaches_it_once(
    tmp_path: Path, to_group: bool
) -> None:
    proc, runs, stopped = start(tmp_path)
    try:
        wait_until(lambda: len(children(runs)) == 3, 30, what="the third child")
        if to_group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        errors = (tmp_path / "stderr").read_text()
        assert proc.returncode == 0, errors
        assert stopped.read_text() == "1"  # one SIGTERM: RQ's warm shutdown, not its cold one
        assert errors.count("its process ended with exit code 1; starting another") == 2
        assert not any(alive(pid) for pid in children(runs))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_child_ends_with_its_supervisor_killed_outright(tmp_path: Path) -> None:
    proc, runs, _ = start(tmp_path)
    try:
        wait_until(lambda: len(children(runs)) == 3, 30, what="the third child")
        last = children(runs)[-1]
        os.killpg(proc.pid, signal.SIGKILL)  # the child has a group of its own
        proc.wait(30)
        wait_until(lambda: not alive(last), 30, what="the child gone with its supervisor")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
