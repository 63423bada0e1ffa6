"""The web process's listening sockets (gunicorn.conf.py ``reuse_port``): each worker
listens on its own, so the kernel spreads new connections across the workers instead of
the first worker to wake taking a burst of them; GUNICORN_REUSE_PORT=false shares one."""

import os
import signal
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.constants import SECRET
from tests.support.processes import Gunicorn, RedisServer, service_env, tcp_sockets, wait_until
from webhook.serving import reuse_port_caveat

LISTEN, ESTABLISHED = "0A", "01"
CONNECTIONS = 32
"""All on one of two workers by chance: 2 in 2**32 with the kernel's even hash."""


def tcp_inodes(port: int, state: str) -> set[int]:
    """Inodes of this machine's TCP sockets on local ``port`` in ``state``."""
    return {s.inode for s in tcp_sockets() if s.local_port == port and s.state == state}


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
def shared_socket(redis_server: RedisServer, tmp_path: Path) -> Iterator[Gunicorn]:
    env = service_env(
        redis_server.url, {"STRIPE_WEBHOOK_SECRET": SECRET, "GUNICORN_REUSE_PORT": "false"}
    )
    server = Gunicorn(env, log=tmp_path / "g.log").start()
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
    wait_until(
        lambda: not old & set(web.worker_pids()) and len(web.worker_pids()) == 2,
        timeout=30,
        what="two new workers after SIGHUP",
    )
    web.wait_ready()
    master, *workers = listeners(web).items()
    assert master[1] == set() and all(len(held) == 1 for _, held in workers)
    # The master says what a stopping worker costs unless this kernel migrates its queue.
    warned = "set net.ipv4.tcp_migrate_req=1" in (tmp_path / "gunicorn.log").read_text()
    assert warned == (reuse_port_caveat() is not None)
