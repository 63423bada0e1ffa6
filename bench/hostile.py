"""Section 6: the shipped server before and after the hostile-input work, side by side.

Two servers run at once, each on its own Redis: this tree's and an earlier commit's
(``git archive`` into the work directory; by default 9bdc4e5, the commit before it), each
under its own gunicorn.conf.py as shipped (then gthread, 2 x 4 threads; now the gevent
worker of webhook/server.py). In alternating rounds: peak load (wrk, 16 connections),
p99 at one fixed rate (half the earlier commit's median peak, offered to both), and forged
requests (signed with a wrong secret) with the append-only file's growth and the keys
added per rejection.

    .venv/bin/python -m bench.hostile [--quick] [--before REV]

``--before-env``/``--after-env NAME=VALUE`` add to one side's environment: the same commit
twice with one setting changed is an A/B of that setting, e.g. gunicorn's HTTP parser:

    .venv/bin/python -m bench.hostile --quick --before HEAD \
        --before-env GUNICORN_CMD_ARGS=--http-parser=python \
        --after-env GUNICORN_CMD_ARGS=--http-parser=fast
"""

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import load
from bench.common import (
    RESULTS,
    ROOT,
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
from bench.load import summarise
from bench.stats import alternate, column, ratio_runs, spread, target

FORGED_SECRET = "whsec_forged_0123456789abcdef0123456789ab"
VARIANTS = ("before", "after")
BEFORE = "9bdc4e5"
"""The last commit before the hostile-input work (docs/BENCHMARKS.md, section 6)."""


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def export_tree(rev: str, into: Path) -> str:
    """Write commit ``rev``'s files into ``into``; returns its short hash."""
    commit = git("rev-parse", "--short", rev)
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return commit


def served_commit() -> str:
    """This tree's commit, marked if the code it serves has uncommitted changes."""
    changed = git(
        "status", "--porcelain", "--", "ledger", "webhook", "gunicorn.conf.py", "pyproject.toml"
    )
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if changed else "")


def aof_and_keys(redis: RedisServer) -> tuple[int, int]:
    client = redis.client()
    try:
        return int(client.info("persistence")["aof_current_size"]), int(client.dbsize())
    finally:
        client.close()


class Hostile:
    def __init__(self, quick: bool, before: str, envs: dict[str, dict[str, str]]) -> None:
        self.runs = 3 if quick else 7
        # Three times as many half-load rounds as peak rounds: a p99 over 2 s at ~600 req/s is
        # the 13th slowest request, one stall of the shared machine moves it tenfold, and
        # stalls come and go over seconds, so many short alternating rounds beat few long ones.
        self.paced_runs = 5 if quick else 21
        self.paced_duration = 1.5 if quick else 2.0
        self.envs = envs
        self.wd = Workdir.make("hostile")
        self.before = export_tree(before, self.wd.sub("before-tree"))
        factory = EventFactory(seed=6)
        self.pool = Pool(self.wd.path / "pool.bin", factory.events(14000), SECRET)
        self.forged = Pool(self.wd.path / "forged.bin", factory.events(2000), FORGED_SECRET)

    def peak_run(self, server: Gunicorn, redis: RedisServer) -> Callable[[int], dict[str, Any]]:
        def run(_round: int) -> dict[str, Any]:
            assert redis.proc is not None
            client = redis.client()
            client.flushdb()
            client.close()
            return load.peak(server.port, server.pids, redis.proc.pid, self.pool.fresh(), 2.0)

        return run

    def paced_run(
        self, server: Gunicorn, redis: RedisServer, rate: float
    ) -> Callable[[int], dict[str, Any]]:
        def run(_round: int) -> dict[str, Any]:
            assert redis.proc is not None
            pool = self.pool.fresh()
            return load.paced(
                server.port, server.pids, redis.proc.pid, pool, rate, self.paced_duration
            )

        return run

    def forged_run(self, server: Gunicorn, redis: RedisServer) -> Callable[[int], dict[str, Any]]:
        def run(_round: int) -> dict[str, Any]:
            assert redis.proc is not None
            aof, keys = aof_and_keys(redis)
            result = load.peak(server.port, server.pids, redis.proc.pid, self.forged.fresh(), 2.0)
            aof_after, keys_after = aof_and_keys(redis)
            n = result["requests"]
            result["aof_bytes_per_rejection"] = (aof_after - aof) / n if n else None
            result["keys_per_rejection"] = (keys_after - keys) / n if n else None
            return result

        return run

    def run(self) -> dict[str, Any]:
        with Stack() as st:
            redis, servers = {}, {}
            for name, root in (("before", self.wd.path / "before-tree"), ("after", ROOT)):
                redis[name] = st.start(RedisServer(self.wd.sub(f"redis-{name}")))
                env = service_env(redis[name].url, self.wd.path, self.envs.get(name))
                log_path = self.wd.path / f"{name}.log"
                servers[name] = st.start(Gunicorn(env, log=log_path, root=root))
                load.warm_up(servers[name], self.pool)
            peak = alternate({n: self.peak_run(servers[n], redis[n]) for n in VARIANTS}, self.runs)
            rate = spread(column(peak["before"], "rps"))["median"] / 2
            log(f"hostile: half load = {rate:.0f} req/s for both")
            paced = alternate(
                {n: self.paced_run(servers[n], redis[n], rate) for n in VARIANTS}, self.paced_runs
            )
            forged = alternate(
                {n: self.forged_run(servers[n], redis[n]) for n in VARIANTS}, self.runs
            )
        return {
            "before_commit": self.before,
            "after_commit": served_commit(),
            "env": self.envs,
            "half_load_rate": rate,
            "peak_runs": peak,
            "peak": summarise(peak),
            "half_load_runs": paced,
            "half_load": summarise(paced),
            "forged_runs": forged,
            "forged": {
                n: {
                    m: spread(column(forged[n], m))
                    for m in ("rps", "aof_bytes_per_rejection", "keys_per_rejection")
                }
                for n in VARIANTS
            },
            "ratios": {
                "after/before peak rps": ratio_runs(
                    column(peak["after"], "rps"), column(peak["before"], "rps")
                ),
                "after/before p99 at half load": ratio_runs(
                    column(paced["after"], "p99_ms"), column(paced["before"], "p99_ms")
                ),
            },
        }


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    r, forged = result["ratios"], result["forged"]["after"]
    return [
        target(
            "6. peak, after / before", r["after/before peak rps"]["ratio_of_medians"], 0.9, True
        ),
        target(
            "6. p99 at half load, after / before",
            r["after/before p99 at half load"]["ratio_of_medians"],
            1.1,
            False,
        ),
        target(
            "6. AOF bytes per forged request (after)",
            forged["aof_bytes_per_rejection"]["median"],
            1.0,
            False,
        ),
    ]


def run(
    quick: bool = False, before: str | None = None, envs: dict[str, dict[str, str]] | None = None
) -> dict[str, Any]:
    bench = Hostile(quick, before or BEFORE, envs or {})
    try:
        result = {"section": "hostile", "quick": quick, **bench.run()}
    finally:
        bench.wd.remove()
    result["targets"] = targets(result)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Before/after of the hostile-input work (section 6)")
    p.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    p.add_argument("--before", help=f"the earlier commit (default: {BEFORE})")
    for side in VARIANTS:
        p.add_argument(f"--{side}-env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--out", type=Path, default=RESULTS / "hostile.json")
    args = p.parse_args(argv)
    envs = {
        side: dict(pair.split("=", 1) for pair in getattr(args, f"{side}_env")) for side in VARIANTS
    }
    result = run(args.quick, args.before, envs)
    write_json(args.out, result)
    log(f"wrote {args.out}")
    for t in result["targets"]:
        log(f"  {'met   ' if t['met'] else 'MISSED'} {t['target']}: {t['measured']} ({t['goal']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
