"""CPU accounting from /proc: per process (with its threads and reaped children) and for the
whole machine."""

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _ticks(pid: int) -> int | None:
    """CPU ticks of a live process and its reaped children, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2 :].split()
    # utime + stime + cutime + cstime: a forking RQ worker's horses are reaped by it.
    return int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds so far of these (live) processes, all their threads."""
    total = 0
    for pid in pids:
        ticks = _ticks(pid)
        if ticks is not None:
            total += ticks
    return total / TICKS


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (all cores, all processes)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / TICKS


class CpuMeter:
    """CPU seconds used by named process groups between start() and stop(), plus
    ``machine``: the whole machine's busy CPU seconds over the same interval, so the rest
    (other processes, the kernel's interrupt and I/O work, the harness itself) can be
    reported as ``other``."""

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
