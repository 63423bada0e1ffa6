"""A replicated ledger on one machine: one primary, two replicas and three Sentinels on
loopback ports (``scripts/run.sh --ha``; the failover tests and benchmark use the same
files on free ports).

Every node and Sentinel gets its own config file in its own directory: Sentinel rewrites
them when it changes a node's role or learns the topology, so they are written once and
then left to it (a restart finds the current primary). Data nodes include the shipped
``config/redis.conf`` and ``config/replication.conf``, never written.

    python -m ledgerctl.ha DIR    # write DIR/redis-{1,2,3}, DIR/sentinel-{1,2,3} if absent,
                                # print the service's REDIS_SENTINELS and REDIS_SENTINEL_MASTER
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

MASTER = "ledger"
"""The name the Sentinels monitor the primary under (REDIS_SENTINEL_MASTER)."""


@dataclass(frozen=True)
class Timing:
    """How fast Sentinel acts; shipped for local use, shorter in tests."""

    down_after_ms: int = 3000
    """A node silent this long is down for one Sentinel; two agreeing start a failover."""
    failover_timeout_ms: int = 10000
    """How long one failover may take before another Sentinel may try again."""


@dataclass(frozen=True)
class Topology:
    base: Path
    node_ports: tuple[int, int, int] = (6390, 6391, 6392)
    sentinel_ports: tuple[int, int, int] = (26390, 26391, 26392)
    timing: Timing = field(default_factory=Timing)
    config: Path = field(default_factory=lambda: Path("config").resolve())
    """The shipped config/ the nodes include: the checkout's (the working directory's, as
    for the Procfile's redis line), also when the project is installed from its wheel."""

    def node_dir(self, index: int) -> Path:
        return self.base / f"redis-{index + 1}"

    def sentinel_dir(self, index: int) -> Path:
        return self.base / f"sentinel-{index + 1}"

    @property
    def sentinels_setting(self) -> str:
        """REDIS_SENTINELS for the service."""
        return ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)


def node_config(topology: Topology, index: int) -> str:
    """A data node: the shipped configs, its port and directory; all but the first start
    as replicas of the first."""
    lines = [
        f"include {topology.config / 'redis.conf'}",
        f"include {topology.config / 'replication.conf'}",
        f"port {topology.node_ports[index]}",
        f"dir {topology.node_dir(index)}",
        "logfile redis.log",
    ]
    if index:
        lines.append(f"replicaof 127.0.0.1 {topology.node_ports[0]}")
    return "\n".join(lines) + "\n"


def sentinel_config(topology: Topology, index: int) -> str:
    """A Sentinel watching the first node; a majority of the three (2) decides."""
    t = topology.timing
    return "\n".join(
        [
            "bind 127.0.0.1",
            f"port {topology.sentinel_ports[index]}",
            f"dir {topology.sentinel_dir(index)}",
            "logfile sentinel.log",
            f"sentinel monitor {MASTER} 127.0.0.1 {topology.node_ports[0]} 2",
            f"sentinel down-after-milliseconds {MASTER} {t.down_after_ms}",
            f"sentinel failover-timeout {MASTER} {t.failover_timeout_ms}",
            f"sentinel parallel-syncs {MASTER} 1",
            "",
        ]
    )


def write(topology: Topology) -> list[Path]:
    """Every config file, written only where none exists yet; returns their paths."""
    paths = []
    for index in range(3):
        for directory, name, text in (
            (topology.node_dir(index), "redis.conf", node_config(topology, index)),
            (topology.sentinel_dir(index), "sentinel.conf", sentinel_config(topology, index)),
        ):
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / name
            if not path.exists():
                path.write_text(text)
            paths.append(path)
    return paths


def main() -> None:
    topology = Topology(Path(sys.argv[1] if len(sys.argv) > 1 else "var/ha").resolve())
    write(topology)
    print(f"REDIS_SENTINELS={topology.sentinels_setting}")
    print(f"REDIS_SENTINEL_MASTER={MASTER}")


if __name__ == "__main__":
    main()
