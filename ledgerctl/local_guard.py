"""What ``scripts/run.sh`` checks before it starts anything and holds while it runs: its
ports free, its Redis data folder its own; and whether the server answering /readyz is its
own, not another stack's on the same port.

A data folder is held with ``flock`` on the folder itself by the launcher's process (the
descriptor is not inherited by its children), for as long as the launcher runs: a second
stack pointed at the same folder, on any port, is refused before its Redis could open the
first one's append-only file.
"""

import fcntl
import os
from collections.abc import Mapping
from pathlib import Path

from ledger.ports import port_in_use

OWNER_FILE = "run.pid"
"""In a held folder: the pid of the launcher holding it (for the refusal's message)."""

_held: list[int] = []
"""Descriptors of the folders this process holds (closed when it exits)."""


def taken_ports(ports: Mapping[str, str]) -> list[str]:
    """One line per address (``host:port``, by the name of its setting) something else
    already listens on."""
    problems = []
    for name, address in ports.items():
        why = port_in_use(address)
        if why:
            problems.append(f"{name}: {why}")
    return problems


def hold(folder: Path) -> str | None:
    """Hold ``folder`` (made if absent) for this process's life; else why not, naming it."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        owner = _read_owner(folder)
        by = f"scripts/run.sh pid {owner}" if owner else "another scripts/run.sh"
        return f"{folder}: data folder held by {by}; stop that stack or use another checkout"
    _held.append(fd)
    (folder / OWNER_FILE).write_text(f"{os.getpid()}\n")
    return None


def _read_owner(folder: Path) -> str | None:
    try:
        return (folder / OWNER_FILE).read_text().strip() or None
    except OSError:
        return None


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (from /proc), or None when it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether ``pid`` is ``ancestor`` or one of its descendants."""
    current: int | None = pid
    while current is not None and current > 1:
        if current == ancestor:
            return True
        current = parent_pid(current)
    return False
