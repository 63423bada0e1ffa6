"""The replicated ledger: what waiting for a replica costs, and how long a failover takes.

    .venv/bin/python -m bench.failover [--quick] [--runs N] [--only intake|drain|script|window]

1 intake: peak req/s (wrk, distinct signed events) of the shipped web server (2 gevent
  processes) on a primary with two replicas and three Sentinels, LEDGER_MIN_REPLICAS=1 vs
  0, and on one Redis through REDIS_URL (as before replication) for reference; rounds
  alternate. All on this machine: the replicas share its cores.
2 drain: N recorded payments fulfilled by 2 fulfilment-workers (SQLite action), MIN=1 vs 0.
3 script: record_delivery.lua alone on the primary with redis-benchmark (50 connections,
  appendfsync always, two replicas attached): the ceiling of one primary.
4 window: Stripe-like senders (tests/support/storm.py), kill -9 of the primary;
  unavailability is the first answer that is not a 2xx to the first 2xx after it; per
  Sentinel timing.

Rounds per section: 5, 3 with --quick, or --runs. Writes var/bench/failover.json (ignored by
git; each section notes the commit it ran at); docs/DEPLOYMENT.md and docs/RELIABILITY.md
keep the tables.
"""

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from redis import Redis

from bench import load
from bench.common import (
    RESULTS,
    SECRET,
    Gunicorn,
    RedisServer,
    Stack,
    Workdir,
    log,
    machine,
    payment_states,
    service_env,
    write_json,
)
from bench.cpu import CpuMeter
from bench.drain import HELD, QUEUE, RELEASE
from bench.events import EventFactory, Pool
from bench.failover_script import script_throughput
from bench.recording import delivery
from bench.stats import alternate, column, median, ratio_runs, spread
from ledger import keys, settings
from ledger.connection import close, connect
from ledger.deliveries import Ledger
from ledgerctl.ha import Timing
from tests.support.ha import Cluster, FulfilmentWorker
from tests.support.storm import Storm, payments, unavailable_window

UNUSED_URL = "redis://127.0.0.1:1/0"


class Failover:
    def __init__(self, quick: bool, runs: int | None = None) -> None:
        self.runs = runs or (3 if quick else 5)
        self.duration = 2.0 if quick else 3.0
        self.n_drain = 150 if quick else 300
        self.wd = Workdir.make("failover")

    def env(self, cluster: Cluster | None, min_replicas: int, **extra: str) -> dict[str, str]:
        where = cluster.env if cluster is not None else {}
        url = UNUSED_URL if cluster is not None else extra.pop("REDIS_URL")
        base = {**where, "LEDGER_MIN_REPLICAS": str(min_replicas), **extra}
        return service_env(url, self.wd.path, base)

    def intake(self) -> dict[str, Any]:
        log("failover: intake, LEDGER_MIN_REPLICAS=1 vs 0 vs one Redis")
        pool = Pool(self.wd.path / "pool.bin", EventFactory(seed=7).events(14000), SECRET)
        with Stack() as st:
            cluster = Cluster(self.wd.sub("ha-intake"))
            st.callback(cluster.close)
            cluster.start()
            single = st.start(RedisServer(self.wd.sub("single")))
            envs = {
                "replicas, wait for 1": self.env(cluster, 1),
                "replicas, no wait": self.env(cluster, 0),
                "one Redis (REDIS_URL)": self.env(None, 0, REDIS_URL=single.url),
            }
            servers = {
                name: st.start(Gunicorn(env, log=self.wd.path / "web.log"))
                for name, env in envs.items()
            }
            for server in servers.values():
                load.warm_up(server, pool)

            def run(name: str) -> Any:
                def once(_round: int) -> dict[str, Any]:
                    on_cluster = name != "one Redis (REDIS_URL)"
                    port = cluster.primary() if on_cluster else single.port
                    with Redis(port=port) as primary:
                        primary.flushall()
                    proc = cluster.nodes[port] if on_cluster else single.proc
                    assert proc is not None
                    s = servers[name]
                    return load.peak(s.port, s.pids, proc.pid, pool.fresh(), self.duration)

                return once

            runs = alternate({name: run(name) for name in servers}, self.runs)
        rps = {name: column(rs, "rps") for name, rs in runs.items()}
        summary = {n: {m: spread(column(rs, m)) for m in load.METRICS} for n, rs in runs.items()}
        return {
            "runs": runs,
            "summary": summary,
            "ratios": {
                "wait 1 / no wait": ratio_runs(
                    rps["replicas, wait for 1"], rps["replicas, no wait"]
                ),
                "no wait / one Redis": ratio_runs(
                    rps["replicas, no wait"], rps["one Redis (REDIS_URL)"]
                ),
            },
        }

    def drain(self) -> dict[str, Any]:
        log("failover: fulfilment drain, LEDGER_MIN_REPLICAS=1 vs 0")
        factory = EventFactory(seed=8)
        with Stack() as st:
            cluster = Cluster(self.wd.sub("ha-drain"))
            st.callback(cluster.close)
            cluster.start()

            def run(min_replicas: int) -> Any:
                def once(_round: int) -> dict[str, Any]:
                    return self._drain_once(cluster, min_replicas, factory)

                return once

            runs = alternate({"wait for 1": run(1), "no wait": run(0)}, self.runs)
        rate = {name: column(rs, "rate") for name, rs in runs.items()}
        metrics = ("rate", "worker_cpu_us_per_job", "redis_cpu_us_per_job")
        return {
            "runs": runs,
            "summary": {n: {m: spread(column(rs, m)) for m in metrics} for n, rs in runs.items()},
            "ratios": {"wait 1 / no wait": ratio_runs(rate["wait for 1"], rate["no wait"])},
        }

    def _drain_once(
        self, cluster: Cluster, min_replicas: int, factory: EventFactory
    ) -> dict[str, Any]:
        db = self.wd.path / "downstream.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        env = self.env(cluster, min_replicas, FULFILMENT_ACTION=f"sqlite:///{db}")
        s = settings.load(env)
        redis = connect(s)
        redis.flushall()
        ledger = Ledger(redis, s)
        for payment in factory.payments(self.n_drain):
            for body in payment.bodies:
                ledger.record_delivery(delivery(ledger, body))
        queue_key = keys.rq_queue(QUEUE)
        redis.rename(queue_key, HELD)
        workers = [FulfilmentWorker(env, self.wd.path / "worker.log").start() for _ in range(2)]
        try:
            deadline = time.monotonic() + 30
            while redis.scard(f"rq:workers:{QUEUE}") < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # registered, then into the blocking pop on the empty queue
            primary = cluster.nodes[cluster.primary()].pid
            meter = CpuMeter(
                {
                    "workers": lambda: [w.proc.pid for w in workers if w.proc],
                    "redis": lambda: [primary],
                }
            )
            meter.start()
            released = time.monotonic()
            redis.eval(RELEASE, 2, HELD, queue_key)
            while payment_states(redis).get("fulfilled", 0) < self.n_drain:
                if time.monotonic() - released > 300:
                    raise RuntimeError("the drain did not finish")
                time.sleep(0.02)
            wall = time.monotonic() - released
            cpu = meter.stop()
        finally:
            for worker in workers:
                worker.stop()
        ends = sorted(
            int(ms)
            for ms in (redis.hget(k, "fulfilled_at") for k in redis.scan_iter(keys.payment("*")))
            if ms
        )
        close(redis)
        lo, hi = ends[len(ends) // 10], ends[(len(ends) * 9) // 10]
        inner = sum(1 for e in ends if lo < e <= hi)
        return {
            "jobs": self.n_drain,
            "rate": inner / ((hi - lo) / 1000) if hi > lo else self.n_drain / wall,
            "rate_whole_window": self.n_drain / wall,
            "worker_cpu_us_per_job": cpu["workers"] / self.n_drain * 1e6,
            "redis_cpu_us_per_job": cpu["redis"] / self.n_drain * 1e6,
        }

    def window(self) -> dict[str, Any]:
        log("failover: unavailability window of a kill -9 of the primary")
        out: dict[str, Any] = {}
        for timing in (Timing(down_after_ms=1000, failover_timeout_ms=3000), Timing()):
            name = f"down-after {timing.down_after_ms} ms"
            results = [self._window_once(timing, i) for i in range(self.runs)]
            out[name] = {
                "runs": results,
                "first_error_to_first_2xx_s": spread(r["window_s"] for r in results),
                "kill_to_first_2xx_s": spread(r["kill_to_2xx_s"] for r in results),
            }
            log(f"  {name}: median window {median(r['window_s'] for r in results):.2f} s")
        return out

    def _window_once(self, timing: Timing, index: int) -> dict[str, Any]:
        events = [e for p in payments(random.Random(index), 300) for e in p]
        with Stack() as st:
            cluster = Cluster(self.wd.sub(f"ha-window-{timing.down_after_ms}-{index}"), timing)
            st.callback(cluster.close)
            cluster.start()
            web = st.start(Gunicorn(self.env(cluster, 1)))
            old = cluster.primary()
            storm = Storm(web.url, events, SECRET, senders=8).start()
            storm.wait_answers(200)
            killed = time.monotonic()
            cluster.kill(old)
            cluster.wait_failover(old)
            storm.join()
        window = unavailable_window(storm.answers, killed)
        back = next(
            a.at for a in storm.answers if a.at > killed + (window or 0) and a.status == 200
        )
        return {
            "window_s": window,
            "kill_to_2xx_s": back - killed,
            "statuses": dict(storm.statuses),
        }


def run(quick: bool, only: list[str], runs: int | None = None) -> dict[str, Any]:
    bench = Failover(quick, runs)
    sections = {
        "intake": bench.intake,
        "drain": bench.drain,
        "script": lambda: script_throughput(bench.wd, bench.runs),
        "window": bench.window,
    }
    path = RESULTS / "failover.json"
    # --only re-runs some sections and keeps the others' last results.
    result: dict[str, Any] = json.loads(path.read_text()) if only and path.exists() else {}
    result.update({"machine": machine(), "quick": quick})
    at = {k: result["machine"][k] for k in ("git", "git_dirty", "date")}
    try:
        for name, section in sections.items():
            if not only or name in only:
                result[name] = {**section(), "at": at, "rounds": bench.runs}
                write_json(path, result)
    finally:
        bench.wd.remove()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--runs", type=int, help="rounds per section (default 5, quick 3)")
    args = parser.parse_args(argv)
    run(args.quick, args.only, args.runs)
    print(f"written: {RESULTS / 'failover.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
