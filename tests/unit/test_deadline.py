"""The call deadline in a child process: Python code is interrupted at the deadline and the
process goes on; the job's own alarm (RQ's job timeout) is put back after each call; a call
blocked inside C code (SQLite waiting for a lock this test holds) ends with its process,
from the main thread or a helper thread; RQ's job timeout in a worker slot's thread leaves no
watchdog armed."""

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import ROOT

PYTHON_CODE = """
import time
from workers.deadline import DeadlineExceeded, call_within
try:
    call_within(0.2, lambda: time.sleep(30), kill_after=0.3)
except DeadlineExceeded:
    print("deadline", flush=True)
call_within(1.0, lambda: time.sleep(0.6), kill_after=0.3)  # past the first kill time
print("alive", flush=True)
"""

JOB_ALARM = """
import signal, time
from workers.deadline import DeadlineExceeded, call_within
fired = []
def job_timeout(signum, frame):  # RQ's handler for its job timeout
    fired.append("job timeout")
signal.signal(signal.SIGALRM, job_timeout)
signal.setitimer(signal.ITIMER_REAL, 3.0)  # RQ's job timeout, longer than the call's
def put_back():
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    ok = signal.getsignal(signal.SIGALRM) is job_timeout and (fired or 0 < left <= 3.0)
    if not ok:  # else the wait below would not end
        raise SystemExit(f"not put back: {signal.getsignal(signal.SIGALRM)}, {left}")
    print("put back")
print(call_within(1.0, lambda: "answered", kill_after=1.0))
put_back()
try:
    call_within(0.1, lambda: time.sleep(30), kill_after=1.0)
except DeadlineExceeded:
    print("deadline")
put_back()
while not fired:
    signal.pause()  # the job's alarm still goes off, to the job's handler
print(fired[0], flush=True)
"""

STUCK_IN_C = """
import sqlite3, sys, threading
from workers.deadline import call_within
def insert():
    db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
    db.execute("INSERT INTO t VALUES (1)")
def call():
    call_within(0.2, insert, kill_after=0.3)
    print("returned", flush=True)
if sys.argv[2] == "thread":
    helper = threading.Thread(target=call)
    helper.start()
    helper.join()
else:
    call()
"""

JOB_TIMEOUT_IN_A_SLOT = """
import threading
from rq.timeouts import JobTimeoutException, TimerDeathPenalty
from workers.deadline import WATCHDOG, call_within
started, go, penalty, ended = threading.Event(), threading.Event(), [], []
def call():
    started.set()
    go.wait()
    return "applied"
def job():  # a job in a worker slot's thread, under RQ's job timeout for such threads
    penalty.append(TimerDeathPenalty(60))
    try:
        call_within(30, call, kill_after=1.0)
    except JobTimeoutException:
        ended.append("job timeout")
slot = threading.Thread(target=job, name="fulfil_0")
slot.start()
started.wait()
penalty[0].handle_death_penalty()  # RQ's timer fires while the slot waits for its call
go.set()
slot.join()
print(ended[0], "watchdog armed" if WATCHDOG.kill_at else "watchdog off", flush=True)
"""


def child(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, timeout=60
    )


def test_python_code_is_interrupted_and_its_process_goes_on() -> None:
    done = child(PYTHON_CODE)
    assert (done.returncode, done.stdout) == (0, b"deadline\nalive\n"), done.stderr


def test_the_jobs_own_alarm_is_put_back_after_each_call() -> None:
    """SIGALRM is RQ's job timeout too: after the call (answered or cut off at its deadline)
    its handler is back and its timer runs on, never longer than it was."""
    done = child(JOB_ALARM)
    expected = b"answered\nput back\ndeadline\nput back\njob timeout\n"
    assert (done.returncode, done.stdout) == (0, expected), done.stderr


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_call_blocked_in_c_code_ends_with_its_process(where: str, tmp_path: Path) -> None:
    path = tmp_path / "locked.sqlite3"
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("CREATE TABLE t (x)")
    lock.execute("BEGIN EXCLUSIVE")
    try:
        done = child(STUCK_IN_C, str(path), where)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert done.returncode == 1 and b"returned" not in done.stdout
    assert b"Timeout" in done.stderr  # faulthandler's dump: every thread's traceback


def test_rq_timing_out_a_slots_job_leaves_no_watchdog_armed() -> None:
    """RQ's TimerDeathPenalty raises in a worker slot's thread wherever it is: here as the
    wait for the call returns. The call has stopped, so the watchdog is off: armed, it
    would end the process, every other call in flight with it, once the kill time came."""
    done = child(JOB_TIMEOUT_IN_A_SLOT)
    assert (done.returncode, done.stdout) == (0, b"job timeout watchdog off\n"), done.stderr
