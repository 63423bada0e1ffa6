"""The web process's listening sockets (gunicorn.conf.py ``reuse_port``): each worker
listens on its own, so the kernel spreads new connections across the workers instead of
the first worker to wake taking a burst of them; GUNICORN_REUSE_PORT=false shares one."""

import os
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from redis import Redis

from tests.support.processes import Gunicorn, service_env
from webhook.serving import reuse_port_caveat

LISTEN, ESTABLISHED = "0A", "01"
CONNECTIONS = 32
"""All on one of two workers by chance: 2 in 2**32 with the kernel's even hash."""


def tcp_inodes(port: int, state: str) -> set[int]:
    """Inodes of this machine's TCP sockets on local ``port`` in ``state`` (/proc/net/tcp*)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state:
                found.add(int(fields[9]))
    return found


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process ``pid`` holds open."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def listeners(server: Gunicorn) -> dict[int, set[int]]:
    """Each gunicorn process (master first) and the listening sockets it holds on its port."""
    listening = tcp_inodes(server.port, LISTEN)
    return {pid: socket_inodes(pid) & listening for pid in server.pids()}


@pytest.fixture
def shared_socket(config: dict[str, object], redis: Redis, tmp_path: Path) -> Iterator[Gunicorn]:
    env = service_env(str(config["REDIS_URL"]), {k: str(v) for k, v in config.items()})
    server = Gunicorn({**env, "GUNICORN_REUSE_PORT": "false"}, log=tmp_path / "g.log").start()
    yield server
    server.stop()


def test_each_worker_listens_on_its_own_socket(web: Gunicorn) -> None:
    master, *workers = listeners(web).items()
    assert master[1] == set()  # the master never binds
    assert len(workers) == 2 and all(len(held) == 1 for _, held in workers)
    assert workers[0][1] != workers[1][1]


def test_new_connections_are_spread_across_the_workers(web: Gunicorn) -> None:
    with ExitStack() as stack:
        for _ in range(CONNECTIONS):  # each served, then held open (keep-alive)
            conn = stack.enter_context(socket.create_connection(("127.0.0.1", web.port), 30))
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert conn.recv(64).startswith(b"HTTP/1.1 200")
        served = tcp_inodes(web.port, ESTABLISHED)
        held = {pid: len(socket_inodes(pid) & served) for pid in web.worker_pids()}
    assert sum(held.values()) == CONNECTIONS, held
    assert all(held.values()), held


def test_with_reuse_port_off_every_process_holds_one_shared_socket(
    shared_socket: Gunicorn,
) -> None:
    held = listeners(shared_socket)
    assert len(held) == 3
    assert all(len(inodes) == 1 for inodes in held.values())
    assert len(set.union(*held.values())) == 1


def test_a_reload_serves_on_the_new_workers_own_sockets(web: Gunicorn, tmp_path: Path) -> None:
    old = set(web.worker_pids())
    os.kill(web.pids()[0], signal.SIGHUP)
    deadline = time.monotonic() + 30
    while old & set(web.worker_pids()) or len(web.worker_pids()) < 2:
        assert time.monotonic() < deadline, web.worker_pids()
        time.sleep(0.1)
    web.wait_ready()
    master, *workers = listeners(web).items()
    assert master[1] == set() and all(len(held) == 1 for _, held in workers)
    # The master says what a stopping worker costs unless this kernel migrates its queue.
    warned = "set net.ipv4.tcp_migrate_req=1" in (tmp_path / "gunicorn.log").read_text()
    assert warned == (reuse_port_caveat() is not None)
