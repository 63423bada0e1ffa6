"""Ours as served by several commits (or settings) against the peer, in one run.

Each variant is the shipped server (gunicorn.conf.py, 2 gevent workers) of a commit's tree
(``git archive`` into the work directory, served from there: its own gunicorn.conf.py and
modules, this checkout's virtual environment) or of this checkout, with optional settings;
the peer (bench/baselines.py ``peer_app``, what users write instead) runs beside them. All
share one Redis, flushed before every run; variants alternate within each round (wrk
``-c16``, 2 s); each is reported as the median of its rounds with the paired ratio to the
peer, and CPU per request (gunicorn, Redis), which moves less than req/s when other work
shares the machine. What changed between two commits, one variable at a time:

    .venv/bin/python -m bench.trees --rounds 9 old=08f33d9 now=HEAD
    .venv/bin/python -m bench.trees now=. nocap=.:REQUESTS_PER_CONNECTION=1000000

A variant is ``NAME=TREE[:SETTING=VALUE,...]``; TREE is a commit or ``.`` (this checkout).
"""

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from bench import load
from bench.common import (
    RESULTS,
    SECRET,
    Gunicorn,
    RedisServer,
    Stack,
    Workdir,
    log,
    service_env,
    write_json,
)
from bench.events import EventFactory, Pool
from bench.hostile import export_tree
from tests.support.processes import BIN, ROOT, spawn, wait_for_port

PEER = "peer"


class TreeGunicorn(Gunicorn):
    """The shipped server of another tree: started in that tree, its modules first, so the
    master's gunicorn.conf.py and the settings it imports are that commit's too."""

    def start(self) -> "TreeGunicorn":
        argv = [str(BIN / "gunicorn"), "-c", str(self.root / "gunicorn.conf.py")]
        argv += ["--chdir", str(self.root), self.app]
        self.proc = spawn(argv, {**self.env, "PYTHONPATH": str(self.root)}, self.log, self.root)
        wait_for_port(self.port, proc=self.proc)
        self.wait_ready()
        return self


def parse_variant(text: str) -> tuple[str, str, dict[str, str]]:
    name, _, rest = text.partition("=")
    tree, _, settings = rest.partition(":")
    if not name or not tree or name == PEER:
        raise argparse.ArgumentTypeError(f"NAME=TREE[:SETTING=VALUE,...], not {text!r}")
    extra = dict(pair.split("=", 1) for pair in settings.split(",") if pair)
    return name, tree, extra


def run(variants: list[tuple[str, str, dict[str, str]]], rounds: int) -> dict[str, Any]:
    wd = Workdir.make("trees")
    pool = Pool(wd.path / "pool.bin", EventFactory(seed=1).events(14000), SECRET)
    runs: dict[str, list[dict[str, Any]]] = {}
    commits: dict[str, str] = {}
    try:
        with Stack() as st:
            redis = st.start(RedisServer(wd.sub("redis")))
            servers: dict[str, Gunicorn] = {}
            for name, tree, extra in variants:
                env = service_env(redis.url, wd.path, extra)
                if tree == ".":
                    commits[name] = "this checkout"
                    server: Gunicorn = Gunicorn(env, log=wd.path / f"{name}.log")
                else:
                    root = wd.path / f"tree-{name}"
                    commits[name] = export_tree(tree, root)
                    server = TreeGunicorn(env, log=wd.path / f"{name}.log", root=root)
                servers[name] = st.start(server)
            env = service_env(redis.url, wd.path)
            peer = Gunicorn(env, app="bench.baselines:peer_app", worker_class="gevent")
            servers[PEER] = st.start(peer)
            for server in servers.values():
                load.warm_up(server, pool)
            assert redis.proc is not None
            for i in range(rounds):
                for name, server in servers.items():
                    client = redis.client()
                    client.flushdb()
                    client.close()
                    out = load.peak(server.port, server.pids, redis.proc.pid, pool.fresh(), 2.0)
                    runs.setdefault(name, []).append(out)
                    log(f"  round {i + 1}/{rounds} {name}: {out['rps']:.0f} req/s")
    finally:
        wd.remove()
    return {"section": "trees", "commits": commits, "runs": runs, "summary": summary(runs)}


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    def median(name: str, field: str) -> float:
        return statistics.median(run[field] for run in runs[name])

    out = {}
    for name, own in runs.items():
        paired = [a["rps"] / b["rps"] for a, b in zip(own, runs[PEER], strict=True)]
        out[name] = {
            "rps": median(name, "rps"),
            "peer_ratio_of_medians": median(name, "rps") / median(PEER, "rps"),
            "paired_min": min(paired),
            "paired_max": max(paired),
            "server_cpu_us": median(name, "server_cpu_us_per_req"),
            "redis_cpu_us": median(name, "redis_cpu_us_per_req"),
            "other_cores": median(name, "other_cores"),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="ours from several trees vs the peer, one run")
    p.add_argument("variants", nargs="+", type=parse_variant, help="NAME=TREE[:S=V,...]")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out", type=Path, default=RESULTS / "trees.json")
    args = p.parse_args(argv)
    result = run(args.variants, args.rounds)
    write_json(args.out, result)
    for name, row in result["summary"].items():
        print(
            f"{name} ({result['commits'].get(name, 'bench.baselines')}): {row['rps']:.0f} req/s,"
            f" /peer {row['peer_ratio_of_medians']:.2f}"
            f" ({row['paired_min']:.2f}-{row['paired_max']:.2f}),"
            f" server {row['server_cpu_us']:.0f} µs, Redis {row['redis_cpu_us']:.0f} µs a request,"
            f" other cores {row['other_cores']:.2f}"
        )
    log(f"wrote {args.out} (from {ROOT})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
