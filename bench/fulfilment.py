"""Section 3: fulfilment throughput and latency.

Drain: N payments are recorded through the real ledger (``Ledger.record_delivery``, all
of each payment's events) with no worker running, which queues one real RQ job per
payment. The queue is then held aside, the workers are started and left to go idle,
and the whole queue is released in one Redis command, so every worker starts at once
with its imports done. The drain ends when RQ has finished every job. Compared with
the same number of trivial RQ jobs (``bench.trivial.noop``) drained by the same worker
class and count, and with the default forking ``rq.worker.Worker``. One round of a
variant is bench/drain_round.py.

Latency (``bench/latency.py``): the shipped stack receives whole payments over HTTP at
half of the pipeline's peak; the ledger records first paid delivery -> fulfilled.

    .venv/bin/python -m bench.fulfilment [--quick]
"""

import os
import sys
from typing import Any

from bench import fsyncs, postgres
from bench.common import SIMPLE, RedisServer, Stack, Workdir, log, section_main, service_env
from bench.downstream import HttpDownstream
from bench.drain import (
    BATCH,
    BATCHES,
    FORK,
    NOOP_ACTION,
    SLOTS,
    SLOW_BATCH,
    SLOW_MS,
    SLOW_TODAY,
    ratios,
)
from bench.drain_round import drain_round
from bench.events import EventFactory
from bench.gevent_drain import GEVENT_BATCH, INSTANT_GEVENT, NOOP_GEVENT, SLOW_GEVENT
from bench.gevent_drain import ratios as gevent_ratios
from bench.latency import first_fulfilled
from bench.stats import alternate, column, spread, target


class Fulfilment:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.runs = 3 if quick else 5
        self.n_simple = 200 if quick else 400
        self.n_fork = 12 if quick else 20  # ~6 jobs/s: more would only lengthen the run
        self.n_slow = 40 if quick else 60  # ~20 jobs/s one call at a time
        self.wd = Workdir.make("fulfil")
        self.factory = EventFactory(seed=3)

    def close(self) -> None:
        self.wd.remove()

    def _drain(
        self,
        redis: RedisServer,
        env: dict[str, str],
        kind: str,
        worker_class: str,
        n: int,
        count_fsyncs: bool = False,
    ):
        """One drain (bench/drain_round.py), a variant for ``alternate``; with ``count_fsyncs``
        its Redis fsyncs are counted (strace: untimed)."""

        def run(_round: int) -> dict[str, Any]:
            return drain_round(redis, env, kind, worker_class, n, self.factory, count_fsyncs)

        return run

    def drain(self) -> dict[str, Any]:
        log("fulfilment: drain")
        database, url = postgres.start()
        with Stack() as st:
            st.callback(database.remove)
            redis = st.start(RedisServer(self.wd.sub("redis-drain")))
            slow = st.start(HttpDownstream(SLOW_MS))
            # As shipped (RQ_RESULT_TTL 0): the ledger's own times time the drain.
            env = service_env(redis.url, self.wd.path)
            # The same ledger work with a downstream that does nothing: the SQLite effect's
            # own commit (an fsync) apart.
            free = {**env, "FULFILMENT_ACTION": NOOP_ACTION, "FULFILMENT_REPLAY_SAFE": "1"}
            pg = {**env, "FULFILMENT_ACTION": url, "FULFILMENT_SQL": postgres.ORDER_SQL}
            http = {**env, "FULFILMENT_ACTION": slow.url, "FULFILMENT_REPLAY_SAFE": "1"}
            slots = {"FULFILMENT_CONCURRENCY": str(SLOTS)}
            variants = {
                SLOW_TODAY: self._drain(redis, http, "ours", SIMPLE, self.n_slow),
                SLOW_BATCH: self._drain(redis, {**http, **slots}, "ours", BATCH, self.n_simple),
                SLOW_GEVENT: self._drain(
                    redis, {**http, **slots}, "ours", GEVENT_BATCH, self.n_simple
                ),
                f"ours {BATCHES}": self._drain(
                    redis, {**env, **slots}, "ours", BATCH, self.n_simple
                ),
                INSTANT_GEVENT: self._drain(
                    redis, {**env, **slots}, "ours", GEVENT_BATCH, self.n_simple
                ),
                f"ours, no-op downstream, {BATCHES}": self._drain(
                    redis, {**free, **slots}, "ours", BATCH, self.n_simple
                ),
                NOOP_GEVENT: self._drain(
                    redis, {**free, **slots}, "ours", GEVENT_BATCH, self.n_simple
                ),
                "ours 2xSimpleWorker": self._drain(redis, env, "ours", SIMPLE, self.n_simple),
                "ours, PostgreSQL action, 2xSimpleWorker": self._drain(
                    redis, pg, "ours", SIMPLE, self.n_simple
                ),
                "ours, no-op downstream, 2xSimpleWorker": self._drain(
                    redis, free, "ours", SIMPLE, self.n_simple
                ),
                "trivial 2xSimpleWorker": self._drain(redis, env, "trivial", SIMPLE, self.n_simple),
                "ours 2xWorker(fork)": self._drain(redis, env, "ours", FORK, self.n_fork),
                "trivial 2xWorker(fork)": self._drain(redis, env, "trivial", FORK, self.n_fork),
            }
            only = [w for w in os.environ.get("BENCH_ONLY", "").split(",") if w]
            if only:  # while developing: the variants whose names hold one of these
                variants = {k: v for k, v in variants.items() if any(w in k for w in only)}
            runs = alternate(variants, self.runs)
            counted = {  # one untimed drain each, strace counting Redis's fsyncs
                name: self._drain(redis, variant_env, "ours", cls, self.n_simple, True)(0)
                for name, (variant_env, cls) in {
                    "ours 2xSimpleWorker": (env, SIMPLE),
                    f"ours {BATCHES}": ({**env, **slots}, BATCH),
                    "ours, no-op downstream, 2xSimpleWorker": (free, SIMPLE),
                    f"ours, no-op downstream, {BATCHES}": ({**free, **slots}, BATCH),
                }.items()
                if fsyncs.available() and (not only or any(w in name for w in only))
            }
        return {
            "runs": runs,
            "summary": {
                name: {
                    m: spread(column(rs, m))
                    for m in (
                        "rate",
                        "rate_whole_window",
                        "worker_cpu_us_per_job",
                        "redis_cpu_us_per_job",
                        "redis_commands_per_job",
                        "redis_round_trips_per_job",
                        "other_cores",
                    )
                }
                for name, rs in runs.items()
            },
            "ratios": {**ratios(runs), **gevent_ratios(runs)},
            "fsyncs_counted": {name: r["fsyncs_per_job"] for name, r in counted.items()},
        }


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    r = result["drain"]["ratios"]
    return [
        target(
            "3. ours / trivial RQ job rate (2 x SimpleWorker)",
            r["ours/trivial SimpleWorker"]["ratio_of_medians"],
            0.9,
            True,
        ),
        target(
            "3. 2 x SimpleWorker / 2 x forking Worker (ours)",
            r["ours SimpleWorker/fork Worker"]["ratio_of_medians"],
            4.0,
            True,
        ),
        target(
            f"3. {SLOW_MS} ms downstream: payments/s of 2 x {BATCHES[2:]}",
            result["drain"]["summary"][SLOW_BATCH]["rate"]["median"],
            150.0,
            True,
        ),
        target(
            "3. instant downstream: 2 x BatchWorker / 2 x SimpleWorker (SQLite action)",
            r["BatchWorker/SimpleWorker"]["ratio_of_medians"],
            1.0,
            True,
        ),
        target(
            "3. Redis commands per job: 2 x BatchWorker / 2 x SimpleWorker",
            r["BatchWorker/SimpleWorker"]["redis_commands_per_job"]["ratio_of_medians"],
            0.5,
            False,
        ),
    ]


def run(quick: bool = False) -> dict[str, Any]:
    bench = Fulfilment(quick)
    try:
        drain = bench.drain()
        if os.environ.get("BENCH_ONLY"):  # some variants: the drain alone, no targets
            return {"section": "fulfilment", "quick": quick, "drain": drain}
        rate = drain["summary"]["ours 2xSimpleWorker"]["rate"]["median"]
        latency = first_fulfilled(bench.wd, bench.factory, quick, rate)
    finally:
        bench.close()
    result = {
        "section": "fulfilment",
        "quick": quick,
        "config": {
            "runs": bench.runs,
            "payments_simple": bench.n_simple,
            "payments_fork": bench.n_fork,
            "action": "built-in SQLite (sqlite:///...downstream.sqlite3); PostgreSQL action",
            "postgres_effect": postgres.ORDER_SQL,
            "redis": "config/redis.conf (appendfsync always)",
        },
        "drain": drain,
        "latency": latency,
    }
    result["targets"] = targets(result)
    return result


if __name__ == "__main__":
    sys.exit(section_main("fulfilment", run, sys.argv[1:]))
