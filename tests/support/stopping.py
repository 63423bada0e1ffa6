"""Stopping the processes a test started, by PID: one at a time or together (a teardown
takes as long as its slowest process, not the sum of them)."""

import signal
import subprocess
import time
from collections.abc import Iterable
from typing import Protocol, TypeVar


def stop(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Stop a process we started, by its PID; SIGKILL if it does not go in time."""
    stop_all([proc], sig, timeout)


def stop_all(
    procs: Iterable[subprocess.Popen | None],
    sig: int = signal.SIGTERM,
    timeout: float = 10.0,
    again: float | None = None,
) -> None:
    """Stop processes we started together: ``sig`` to each, then one wait with one deadline
    for all of them, SIGKILL to any still running at the deadline. A teardown takes as long
    as its slowest process, not the sum of them. ``again``: send ``sig`` once more every so
    many seconds to those still running (redis-server refuses a SIGTERM while it writes its
    first AOF after a full sync from its primary, and takes the next one)."""
    live = [proc for proc in procs if proc is not None and proc.poll() is None]
    for proc in live:
        proc.send_signal(sig)
    deadline = time.monotonic() + timeout
    while live := [proc for proc in live if proc.poll() is None]:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            live[0].wait(min(left, again) if again else left)
        except subprocess.TimeoutExpired:
            for proc in live if again else []:
                proc.send_signal(sig)
    for proc in live:
        proc.kill()
        proc.wait(timeout)


class Running(Protocol):
    """What a group stops: anything holding the process it started (None before start)."""

    proc: subprocess.Popen | None


R = TypeVar("R", bound=Running)


class Group:
    """Processes stopped together by :func:`stop_all` (register :meth:`stop` once on an
    ExitStack, :meth:`add` each part as it starts). Reads each member's ``proc`` at stop
    time, so a part restarted during the test is the one stopped."""

    def __init__(self) -> None:
        self.members: list[Running] = []

    def add(self, member: R) -> R:
        self.members.append(member)
        return member

    def stop(self) -> None:
        stop_all(member.proc for member in self.members)
