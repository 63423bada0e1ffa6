"""A replicated ledger for tests: three redis-server and three redis-sentinel processes on
free loopback ports, from the shipped configs (ledgerctl/ha.py), with faults on the primary.

Waits are on what the processes report (Sentinel's primary, ``INFO replication``), never on
time alone.
"""

import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from redis.exceptions import RedisError

from ledger.replication import online_replicas
from ledgerctl.ha import MASTER, Timing, Topology, write
from tests.support.processes import (
    BIN,
    free_port,
    spawn,
    stop,
    tcp_sockets,
    wait_for_port,
    wait_until,
)
from tests.support.stopping import stop_all

FAST = Timing(down_after_ms=1000, failover_timeout_ms=3000)


class Cluster:
    """One primary, two replicas, three Sentinels; nodes addressed by port."""

    def __init__(self, base: Path, timing: Timing = FAST) -> None:
        ports: set[int] = set()
        while len(ports) < 6:
            ports.add(free_port())
        a, b, c, d, e, f = sorted(ports)
        self.topology = Topology(base, (a, b, c), (d, e, f), timing)
        self.nodes: dict[int, subprocess.Popen] = {}
        self.sentinels: list[subprocess.Popen] = []
        self.stopped: set[int] = set()

    @property
    def env(self) -> dict[str, str]:
        """What the service needs to find the primary."""
        return {"REDIS_SENTINELS": self.topology.sentinels_setting, "REDIS_SENTINEL_MASTER": MASTER}

    def start(self) -> "Cluster":
        write(self.topology)
        for index, port in enumerate(self.topology.node_ports):
            self.start_node(port, index)
        for index, port in enumerate(self.topology.sentinel_ports):
            conf = self.topology.sentinel_dir(index) / "sentinel.conf"
            proc = subprocess.Popen([_exe("redis-sentinel"), str(conf)], stdout=subprocess.DEVNULL)
            self.sentinels.append(proc)
            wait_for_port(port, proc=proc)
            _owned(port, proc)
        self.wait_healthy(self.topology.node_ports[0], replicas=2)
        return self

    def start_node(self, port: int, index: int | None = None) -> None:
        """Start (or restart, from its own rewritten config and AOF) the node on ``port``."""
        index = self.topology.node_ports.index(port) if index is None else index
        conf = self.topology.node_dir(index) / "redis.conf"
        proc = subprocess.Popen([_exe("redis-server"), str(conf)], stdout=subprocess.DEVNULL)
        self.nodes[port] = proc
        wait_for_port(port, proc=proc)
        _owned(port, proc)

    def configure(self, name: str, value: str) -> None:
        """CONFIG SET on every data node (kept across a failover: nodes keep their config)."""
        for port in self.topology.node_ports:
            with self.client(port) as node:
                node.config_set(name, value)

    def client(self, port: int) -> Redis:
        return Redis(port=port, socket_timeout=2, socket_connect_timeout=2)

    def reported_primary(self) -> int | None:
        """The primary's port if every Sentinel reports the same one, else None."""
        seen = set()
        for port in self.topology.sentinel_ports:
            try:
                with Redis(port=port, socket_timeout=1) as sentinel:
                    address = sentinel.sentinel_get_master_addr_by_name(MASTER)
            except RedisError:
                return None
            seen.add(int(address[1]) if address else None)
        return seen.pop() if len(seen) == 1 else None

    def role(self, port: int) -> dict:
        try:
            with self.client(port) as node:
                return node.info("replication")
        except RedisError:
            return {}

    def online_replicas(self, port: int) -> int:
        info = self.role(port)
        if info.get("role") != "master":
            return 0
        return online_replicas(info)

    def wait_online(self, primary: int, replicas: int, timeout: float = 60) -> None:
        """Until ``primary`` counts exactly ``replicas`` online replicas."""
        what = f"{primary} with {replicas} online replicas"
        wait_until(lambda: self.online_replicas(primary) == replicas, timeout, 0.1, what)

    def wait_healthy(self, primary: int, replicas: int, timeout: float = 60) -> None:
        """Until the Sentinels agree on ``primary`` and it has ``replicas`` online replicas
        that the Sentinels know, and the Sentinels know each other."""

        def healthy() -> bool:
            if self.reported_primary() != primary or self.online_replicas(primary) < replicas:
                return False
            for port in self.topology.sentinel_ports:
                with Redis(port=port, socket_timeout=1) as sentinel:
                    state = sentinel.sentinel_master(MASTER)
                known = int(state["num-slaves"]) >= replicas
                if not known or int(state["num-other-sentinels"]) < 2 or state["flags"] != "master":
                    return False
            return True

        try:
            wait_until(healthy, timeout, 0.2, f"primary {primary} with {replicas} replicas")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {self.state()}") from exc

    def state(self) -> str:
        """What the nodes and Sentinels report, for a failure message."""
        nodes = {port: self.role(port).get("role", "down") for port in self.topology.node_ports}
        seen = []
        for port in self.topology.sentinel_ports:
            try:
                with Redis(port=port, socket_timeout=1) as sentinel:
                    m = sentinel.sentinel_master(MASTER)
                seen.append(
                    f"{m['port']} {m['flags']} {m['num-slaves']}/{m['num-other-sentinels']}"
                )
            except RedisError as exc:
                seen.append(str(exc))
        return f"nodes {nodes}; Sentinels (primary, flags, replicas/others) {seen}"

    def primary(self) -> int:
        port = wait_until(self.reported_primary, 30, 0.1, "the Sentinels to agree")
        return int(port)

    def wait_failover(self, old: int, timeout: float = 60) -> int:
        """Until every Sentinel reports a primary other than ``old`` that says it is one."""

        def promoted() -> int | None:
            port = self.reported_primary()
            if port is None or port == old or self.role(port).get("role") != "master":
                return None
            return port

        return int(wait_until(promoted, timeout, 0.1, f"a failover away from {old}"))

    def wait_replica_of(self, port: int, primary: int, timeout: float = 60) -> None:
        """Until ``port`` is a replica of ``primary`` with its link up (synced)."""

        def synced() -> bool:
            info = self.role(port)
            return (
                info.get("role") == "slave"
                and int(info.get("master_port", 0)) == primary
                and info.get("master_link_status") == "up"
            )

        wait_until(synced, timeout, 0.2, f"{port} replicating {primary}")

    def kill(self, port: int) -> None:
        stop(self.nodes[port], signal.SIGKILL)

    def pause(self, port: int) -> None:
        self.nodes[port].send_signal(signal.SIGSTOP)
        self.stopped.add(port)

    def resume(self, port: int) -> None:
        self.nodes[port].send_signal(signal.SIGCONT)
        self.stopped.discard(port)

    def close(self) -> None:
        for port in list(self.stopped):
            self.resume(port)
        stop_all([*self.sentinels, *self.nodes.values()], again=0.5)


class FulfilmentWorker:
    """``fulfilment-worker`` (workers/dispatch.py's BatchWorker on the ledger's connection) in
    its own process."""

    def __init__(self, env: dict[str, str], log: Path | None = None) -> None:
        self.env, self.log = env, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> "FulfilmentWorker":
        self.proc = spawn([str(BIN / "fulfilment-worker"), "fulfilment"], self.env, self.log)
        return self

    def stop(self) -> None:
        stop(self.proc)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A started cluster, its processes stopped after the test."""
    ha = Cluster(tmp_path / "ha")
    try:
        yield ha.start()
    finally:
        ha.close()


def _exe(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found: run scripts/bootstrap.sh")
    return path


def _owned(port: int, proc: subprocess.Popen) -> None:
    """The process answering on ``port`` is ``proc``, not another one that took the free port
    first (the machine is shared)."""
    with Redis(port=port, socket_timeout=5) as node:
        pid = int(node.info("server")["process_id"])
    if pid != proc.pid:
        raise RuntimeError(f"127.0.0.1:{port} is served by pid {pid}, not ours ({proc.pid})")


def queued_bytes(server_port: int, client_port: int) -> int:
    """Bytes a client sent that the server has not read yet (its socket's receive queue, from
    /proc/net/tcp): proof that a request reached a frozen server before it resumed."""
    for sock in tcp_sockets():
        if sock.local_port == server_port and sock.remote_port == client_port:
            return sock.receive_queue
    return 0
