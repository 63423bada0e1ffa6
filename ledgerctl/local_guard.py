"""What ``scripts/run.sh`` checks before it starts anything and holds while it runs: its
ports free, its Redis data folder its own; and whether the server answering /readyz is its
own, not another stack's on the same port.

A data folder is held with ``flock`` on the folder itself. The lock belongs to the open
descriptor, which the launcher passes on to every process of its stack (``held()``):
redis-server, gunicorn, the workers and the sweeper each keep it open, so the folder stays
held for as long as any of them lives, also when the launcher itself was killed (a closed
terminal, ``kill -9`` of its process group) and they run on in their own sessions. A second
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

REDIS = "redis-server\n"
"""A redis-server's name in /proc (``comm``)."""

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


def _locked(folder: Path) -> int | None:
    """A descriptor of ``folder`` (made if absent) holding its lock; None while another
    stack holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def hold(folder: Path) -> str | None:
    """Hold ``folder`` (made if absent) for this process's life; else why not, naming it."""
    fd = _locked(folder)
    if fd is None:
        return refusal(folder)
    started = started_by_hand(folder)
    if started:
        os.close(fd)
        return started
    _held.append(fd)
    (folder / OWNER_FILE).write_text(f"{os.getpid()}\n")
    return None


def free(folder: Path) -> str | None:
    """Why ``folder`` is held by another stack, or None; held by nobody after (a check
    before a launcher changes anything, examples/shop/run.sh's)."""
    fd = _locked(folder)
    if fd is None:
        return refusal(folder)
    os.close(fd)
    return started_by_hand(folder)


def started_by_hand(folder: Path) -> str | None:
    """Why ``folder`` (or a folder in it: --ha's nodes) is in use by a redis-server no
    scripts/run.sh started (the Procfile's ``redis`` line run by hand: a redis-server works
    in its ``--dir``), or None. The lock
    cannot see it, and a second Redis there would write into its append-only file."""
    target = str(folder.resolve())
    found = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:  # a shell that is only cd'd there is no Redis: not counted
            where = os.readlink(cwd)
            inside = where == target or where.startswith(target + "/")  # --ha: redis-N
            if inside and (cwd.parent / "comm").read_text() == REDIS:
                found.append(f"{cwd.parent.name} (redis-server)")
        except OSError:
            continue  # gone, or another user's
    if not found:
        return None
    return (
        f"{folder}: data folder in use by {', '.join(sorted(found))}, not started by"
        " scripts/run.sh; stop it or use another checkout"
    )


def held() -> tuple[int, ...]:
    """The descriptors of the folders this process holds, for its children to keep open."""
    return tuple(_held)


def refusal(folder: Path) -> str:
    """Why ``folder`` cannot be used, in one line: the stack holding it, or, when its
    launcher is gone, the processes of it still running."""
    owner = _read_owner(folder)
    if owner is None or Path(f"/proc/{owner}").exists():
        by = f"scripts/run.sh pid {owner}" if owner else "another scripts/run.sh"
        return f"{folder}: data folder held by {by}; stop that stack or use another checkout"
    pids = ", ".join(f"{pid} ({name})" for pid, name in holders(folder)) or "unknown"
    return (
        f"{folder}: data folder held by the processes of scripts/run.sh pid {owner}, which"
        f" is gone: {pids}; stop them or use another checkout"
    )


def holders(folder: Path) -> list[tuple[int, str]]:
    """Processes (of this user: /proc tells no more) with ``folder`` itself open."""
    target = str(folder.resolve())
    found = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == target for fd in fd_dir.iterdir()):
                name = (fd_dir.parent / "comm").read_text().strip()
                found.append((int(fd_dir.parent.name), name))
        except OSError:
            continue  # gone, or another user's
    return sorted(found)


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
