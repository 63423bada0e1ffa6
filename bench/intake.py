"""Sections 1, 2 and 5b: intake over real HTTP to gunicorn.

1. Ours vs baseline A (bare endpoint) vs baseline B (quick-start receiver), per gunicorn
   worker class (sync, gthread, gevent): peak requests/s, p50/p99, CPU per request;
   for gthread and gevent also the bare endpoint + one Redis PING (the floor of any
   Redis round trip) and + one SET of the body (the floor of storing anything);
   then p99 at half of our peak rate, ours vs bare, open loop. Plus a duplicate-heavy
   mix (gthread).
2. Durability: ours on Redis with the shipped ``appendfsync always`` vs ``everysec``.
5b. Ours with 1, 2 and 4 gunicorn workers.

    .venv/bin/python -m bench.intake [--quick] [--only intake|durability|workers]
"""

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import load
from bench.common import (
    RESULTS,
    Gunicorn,
    RedisServer,
    Stack,
    Workdir,
    alternate,
    column,
    log,
    ratio_runs,
    service_env,
    spread,
    target,
    write_json,
)
from bench.events import EventFactory, Pool

OURS = "webhook.wsgi:app"
BARE = "bench.baseline_bare:app"
QUICK = "bench.baseline_quickstart:app"
STORE = "bench.baseline_store:app"
PING = "bench.baseline_store:ping_app"
FLOOR_CLASSES = ("gthread", "gevent")
"""Worker classes that also run the floors (bare + PING, bare + SET)."""
METRICS = (
    "rps",
    "p50_ms",
    "p99_ms",
    "server_cpu_us_per_req",
    "redis_cpu_us_per_req",
    "loadgen_cpu_us_per_req",
    "loadgen_cores",
    "other_cores",
)


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    return {name: {m: spread(column(rs, m)) for m in METRICS} for name, rs in runs.items()}


class Intake:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.runs = 3 if quick else 5
        self.duration = 2.0  # wrk takes whole seconds
        self.paced_duration = 1.5 if quick else 2.0
        self.wd = Workdir.make("intake")
        factory = EventFactory(seed=1)
        self.pool = Pool(self.wd.path / "pool.bin", factory.events(14000), _secret())
        # Duplicate-heavy mix: 500 distinct events cycled, so after the first pass every
        # request is a redelivery of a recorded event.
        self.dup_pool = Pool(self.wd.path / "dup.bin", factory.events(500), _secret())

    def close(self) -> None:
        self.wd.remove()

    def _peak(self, server: Gunicorn, redis: RedisServer, pool: Pool, flush: bool):  # noqa: ANN202
        def run(_round: int) -> dict[str, Any]:
            assert redis.proc is not None
            client = redis.client()
            if flush:
                client.flushdb()
            result = load.peak(
                server.port, server.pids, redis.proc.pid, pool.fresh(), self.duration
            )
            if server.app == OURS:
                stats = client.hgetall("wl:stats")
                dup = int(stats.get(b"duplicates", 0))
                result["duplicates"] = dup
                result["deliveries"] = int(stats.get(b"deliveries", 0))
            client.close()
            return result

        return run

    def _paced(self, server: Gunicorn, redis: RedisServer, rate: float):  # noqa: ANN202
        def run(_round: int) -> dict[str, Any]:
            assert redis.proc is not None
            client = redis.client()
            client.flushdb()
            client.close()
            return load.paced(
                server.port,
                server.pids,
                redis.proc.pid,
                self.pool.fresh(),
                rate,
                self.paced_duration,
            )

        return run

    def worker_classes(self, classes: list[str]) -> dict[str, Any]:
        """Section 1 for each worker class."""
        out: dict[str, Any] = {}
        for cls in classes:
            if cls == "gevent" and importlib.util.find_spec("gevent") is None:
                out[cls] = {"skipped": "gevent is not installed (.venv/bin/pip install gevent)"}
                continue
            log(f"intake: worker class {cls}")
            with Stack() as st:
                redis = st.start(RedisServer(self.wd.sub(f"redis-{cls}")))
                env = service_env(redis.url, self.wd.path)
                servers = {
                    name: st.start(
                        Gunicorn(
                            env,
                            app=app,
                            worker_class=cls,
                            logfile=self.wd.path / f"{name}-{cls}.log",
                        )
                    )
                    for name, app in (
                        ("ours", OURS),
                        ("bare", BARE),
                        ("quickstart", QUICK),
                        *(
                            (("bare_ping", PING), ("bare_set", STORE))
                            if cls in FLOOR_CLASSES
                            else ()
                        ),
                    )
                }
                for server in servers.values():  # warm-up: imports, connections
                    load.peak(server.port, server.pids, None, self.pool.fresh(), 1.0)
                variants = {
                    "ours": self._peak(servers["ours"], redis, self.pool, True),
                    "bare": self._peak(servers["bare"], redis, self.pool, False),
                    "quickstart": self._peak(servers["quickstart"], redis, self.pool, True),
                }
                if cls == "gthread":
                    variants["ours_duplicates"] = self._peak(
                        servers["ours"], redis, self.dup_pool, True
                    )
                if cls in FLOOR_CLASSES:
                    variants["bare_ping"] = self._peak(
                        servers["bare_ping"], redis, self.pool, False
                    )
                    variants["bare_set"] = self._peak(servers["bare_set"], redis, self.pool, True)
                peak = alternate(variants, self.runs)
                ours_rps = spread(column(peak["ours"], "rps"))["median"]
                half = ours_rps / 2
                log(f"intake: {cls} half load = {half:.0f} req/s")
                paced = alternate(
                    {
                        "ours": self._paced(servers["ours"], redis, half),
                        "bare": self._paced(servers["bare"], redis, half),
                    },
                    self.runs,
                )
            out[cls] = {
                "peak_runs": peak,
                "peak": summarise(peak),
                "half_load_rate": half,
                "half_load_runs": paced,
                "half_load": summarise(paced),
                "ratios": {
                    "ours/bare rps": ratio_runs(
                        column(peak["ours"], "rps"), column(peak["bare"], "rps")
                    ),
                    "ours/quickstart rps": ratio_runs(
                        column(peak["ours"], "rps"), column(peak["quickstart"], "rps")
                    ),
                    "quickstart/bare rps": ratio_runs(
                        column(peak["quickstart"], "rps"), column(peak["bare"], "rps")
                    ),
                    "ours/bare p99 at half load": ratio_runs(
                        column(paced["ours"], "p99_ms"), column(paced["bare"], "p99_ms")
                    ),
                },
            }
            if "ours_duplicates" in peak:
                out[cls]["ratios"]["ours duplicates/bare rps"] = ratio_runs(
                    column(peak["ours_duplicates"], "rps"), column(peak["bare"], "rps")
                )
            if "bare_set" in peak:
                out[cls]["ratios"]["bare+PING/bare rps"] = ratio_runs(
                    column(peak["bare_ping"], "rps"), column(peak["bare"], "rps")
                )
                out[cls]["ratios"]["bare+SET/bare rps"] = ratio_runs(
                    column(peak["bare_set"], "rps"), column(peak["bare"], "rps")
                )
                out[cls]["ratios"]["ours/bare+SET rps"] = ratio_runs(
                    column(peak["ours"], "rps"), column(peak["bare_set"], "rps")
                )
        return out

    def durability(self) -> dict[str, Any]:
        """Section 2: the shipped appendfsync always vs everysec (gthread, 2 workers)."""
        log("intake: durability (appendfsync always vs everysec)")
        with Stack() as st:
            servers = {}
            redises = {}
            for mode in ("always", "everysec"):
                redises[mode] = st.start(
                    RedisServer(self.wd.sub(f"redis-{mode}"), appendfsync=mode)
                )
                env = service_env(redises[mode].url, self.wd.path)
                servers[mode] = st.start(Gunicorn(env, logfile=self.wd.path / f"ours-{mode}.log"))
                load.peak(servers[mode].port, servers[mode].pids, None, self.pool.fresh(), 1.0)
            runs = alternate(
                {m: self._peak(servers[m], redises[m], self.pool, True) for m in servers}, self.runs
            )
        return {
            "runs": runs,
            "summary": summarise(runs),
            "ratios": {
                "always/everysec rps": ratio_runs(
                    column(runs["always"], "rps"), column(runs["everysec"], "rps")
                )
            },
        }

    def workers(self) -> dict[str, Any]:
        """Section 5b: ours with 1, 2 and 4 gunicorn workers (gthread, 4 threads each)."""
        log("intake: 1, 2 and 4 gunicorn workers")
        with Stack() as st:
            redis = st.start(RedisServer(self.wd.sub("redis-workers")))
            env = service_env(redis.url, self.wd.path)
            servers = {}
            for n in (1, 2, 4):
                servers[f"{n} worker{'s' if n > 1 else ''}"] = st.start(
                    Gunicorn(env, workers=n, logfile=self.wd.path / f"ours-w{n}.log")
                )
            for server in servers.values():
                load.peak(server.port, server.pids, None, self.pool.fresh(), 1.0)
            runs = alternate(
                {name: self._peak(s, redis, self.pool, True) for name, s in servers.items()},
                self.runs,
            )
        base = column(runs["1 worker"], "rps")
        return {
            "runs": runs,
            "summary": summarise(runs),
            "ratios": {
                f"{name}/1 worker rps": ratio_runs(column(runs[name], "rps"), base) for name in runs
            },
        }


def _secret() -> str:
    from bench.common import SECRET

    return SECRET


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for cls, data in result.get("worker_classes", {}).items():
        if "ratios" not in data:
            continue
        r = data["ratios"]
        out.append(
            target(
                f"1. {cls}: ours / bare throughput",
                r["ours/bare rps"]["ratio_of_medians"],
                0.75,
                True,
            )
        )
        out.append(
            target(
                f"1. {cls}: ours / bare p99 at half our peak",
                r["ours/bare p99 at half load"]["ratio_of_medians"],
                1.5,
                False,
            )
        )
    if "durability" in result:
        out.append(
            target(
                "2. appendfsync always / everysec throughput",
                result["durability"]["ratios"]["always/everysec rps"]["ratio_of_medians"],
                0.9,
                True,
            )
        )
    return out


def run(
    quick: bool = False, only: list[str] | None = None, classes: list[str] | None = None
) -> dict:
    only = only or ["intake", "durability", "workers"]
    bench = Intake(quick)
    result: dict[str, Any] = {
        "section": "intake",
        "quick": quick,
        "config": {
            "runs": bench.runs,
            "peak_seconds": bench.duration,
            "paced_seconds": bench.paced_duration,
            "connections": 16,
            "generator": "wrk -t1 -c16 (bench/wrk_pool.lua)"
            if load.have_wrk()
            else "python closed loop",
            "events": len(bench.pool.bodies),
            "mean_event_bytes": round(bench.pool.mean_bytes),
            "gunicorn": "gunicorn.conf.py, WEB_CONCURRENCY=2, GUNICORN_THREADS=4",
        },
    }
    try:
        if "intake" in only:
            result["worker_classes"] = bench.worker_classes(
                classes or ["sync", "gthread", "gevent"]
            )
        if "durability" in only:
            result["durability"] = bench.durability()
        if "workers" in only:
            result["workers"] = bench.workers()
    finally:
        bench.close()
    result["targets"] = targets(result)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Intake benchmarks (sections 1, 2, 5b)")
    p.add_argument("--quick", action="store_true", help="shorter runs")
    p.add_argument("--only", action="append", choices=["intake", "durability", "workers"])
    p.add_argument("--classes", nargs="+", default=None, help="gunicorn worker classes")
    p.add_argument("--out", type=Path, default=RESULTS / "intake.json")
    args = p.parse_args(argv)
    result = run(args.quick, args.only, args.classes)
    write_json(args.out, result)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
