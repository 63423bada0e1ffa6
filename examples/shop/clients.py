"""Which processes are connected to a local TCP port: run.sh stops a PostgreSQL server an
earlier run left only when none is (a stack of another checkout, a psql session). Read from
/proc: each established connection to ``127.0.0.1:PORT`` (IPv4, as run.sh listens), its
socket's inode, the processes holding it (of this user, or all as root)."""

import os
from pathlib import Path

ESTABLISHED = "01"


def sockets_to(port: int) -> set[str]:
    """The inodes of established IPv4 sockets whose remote end is ``port`` on loopback."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, _, remote_port = fields[2].partition(":")
        if int(remote_port, 16) == port and address == "0100007F" and fields[3] == ESTABLISHED:
            found.add(fields[9])
    return found


def clients(port: int) -> list[tuple[int, str]]:
    """(pid, name) of each process with a connection to 127.0.0.1:``port``."""
    wanted = {f"socket:[{inode}]" for inode in sockets_to(port)}
    found = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(_link(fd) in wanted for fd in fd_dir.iterdir()):
                name = (fd_dir.parent / "comm").read_text().strip()
                found.append((int(fd_dir.parent.name), name))
        except OSError:
            continue  # gone, or another user's
    return sorted(found)


def _link(fd: Path) -> str:
    """Where a descriptor points; '' for one closed since the folder was listed (the rest of
    its process's descriptors are still looked at)."""
    try:
        return os.readlink(fd)
    except OSError:
        return ""
