"""Section 3: fulfilment throughput and latency.

Drain: N payments are recorded through the real ledger (``Ledger.record_delivery``, all
of each payment's events) with no worker running, which queues one real RQ job per
payment. The queue is then held aside, the workers are started and left to go idle,
and the whole queue is released in one Redis command, so every worker starts at once
with its imports done. The drain ends when RQ has finished every job. Compared with
the same number of trivial RQ jobs (``bench.trivial.noop``) drained by the same worker
class and count, and with the default forking ``rq.worker.Worker``.

Latency (``bench/latency.py``): the shipped stack receives whole payments over HTTP at
half of the pipeline's peak; the ledger records first paid delivery -> fulfilled.

    .venv/bin/python -m bench.fulfilment [--quick]
"""

import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import fsyncs, postgres
from bench.common import (
    SIMPLE,
    RedisServer,
    Stack,
    Workdir,
    log,
    payment_states,
    rq_worker,
    section_main,
    service_env,
    stop,
)
from bench.cpu import CpuMeter
from bench.downstream import HttpDownstream
from bench.drain import (
    BATCH,
    BATCHES,
    FORK,
    HELD,
    NOOP_ACTION,
    POLL_CALLS,
    QUEUE,
    RELEASE,
    SLOTS,
    SLOW_BATCH,
    SLOW_MS,
    SLOW_TODAY,
    done,
    end_times,
    ratios,
    redis_work_per_job,
)
from bench.events import EventFactory
from bench.gevent_drain import (
    GEVENT,
    GEVENT_BATCH,
    INSTANT_GEVENT,
    NOOP_GEVENT,
    SLOW_GEVENT,
    gevent_rq_worker,
    os_threads,
)
from bench.gevent_drain import ratios as gevent_ratios
from bench.latency import first_fulfilled
from bench.recording import recorder
from bench.stats import alternate, column, spread, target
from ledger import keys
from ledger.setting_urls import parse_action
from ledger.stored import text


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
        """One drain; with ``count_fsyncs`` its Redis fsyncs are counted (strace: untimed)."""

        def run(_round: int) -> dict[str, Any]:
            client = redis.client()
            client.flushdb()
            action = parse_action(env["FULFILMENT_ACTION"])
            if action.scheme == "sqlite":  # each round starts with an empty order table
                for suffix in ("", "-wal", "-shm"):
                    Path(action.target + suffix).unlink(missing_ok=True)
            if action.scheme == "postgresql":
                postgres.reset(action.target)
            pay_keys: list[str] = []
            if kind == "ours":
                record = recorder(env)
                for payment in self.factory.payments(n):
                    pay_keys.append(keys.payment(payment.key))
                    for body in payment.bodies:
                        record(body)
            else:
                from rq import Queue

                queue = Queue(QUEUE, connection=client)
                with client.pipeline() as pipe:
                    for i in range(n):
                        queue.enqueue(
                            "bench.trivial.noop",
                            f"pi_trivial_{i}",
                            job_timeout=45,
                            result_ttl=3600,
                            pipeline=pipe,
                        )
                    pipe.execute()
            queue_key = f"rq:queue:{QUEUE}"
            job_ids = [text(j) for j in client.lrange(queue_key, 0, -1)]
            assert len(job_ids) == n, (len(job_ids), n)
            client.rename(queue_key, HELD)
            if worker_class.startswith(GEVENT):
                procs = [gevent_rq_worker(env, worker_class) for _ in range(2)]
            else:
                procs = [rq_worker(env, worker_class, burst=False) for _ in range(2)]
            try:
                deadline = time.monotonic() + 30
                while client.scard(f"rq:workers:{QUEUE}") < 2:
                    if time.monotonic() > deadline:
                        codes = [p.poll() for p in procs]
                        raise RuntimeError(f"rq workers did not register (exit codes {codes})")
                    time.sleep(0.05)
                time.sleep(0.5)  # registered, then into BLMOVE on the empty queue
                pids = lambda: [p.pid for p in procs]  # noqa: E731
                redis_proc = redis.proc
                assert redis_proc is not None
                meter = CpuMeter({"workers": pids, "redis": lambda: [redis_proc.pid]})
                meter.start()
                tracing = ExitStack()
                synced = (
                    tracing.enter_context(fsyncs.counting(redis_proc.pid)) if count_fsyncs else {}
                )
                before = client.info("stats")
                released = time.time()
                client.eval(RELEASE, 2, HELD, queue_key)
                deadline = time.monotonic() + 300
                polls = 0
                while done(client, kind) < n:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"drain of {n} {kind} jobs did not finish")
                    polls += 1
                    time.sleep(0.01)
                done_wall = time.time() - released
                cpu = meter.stop()
                threads = [os_threads(p.pid) for p in procs]
                after = client.info("stats")
                tracing.close()
            finally:
                for p in procs:
                    stop(p)
            starts, ends, statuses = end_times(client, kind, job_ids, pay_keys, released)
            window = max(ends) - min(starts)
            # Steady state: jobs ending between the 10th and 90th percentile end times,
            # so each worker's first job (its imports) and the tail do not count.
            ends.sort()
            lo, hi = ends[len(ends) // 10], ends[(len(ends) * 9) // 10]
            inner = sum(1 for e in ends if lo < e <= hi)
            result = {
                "jobs": n,
                "window_s": window,
                "rate": inner / (hi - lo) if hi > lo else n / window,
                "rate_whole_window": n / window,
                "release_to_done_s": done_wall,
                **({"fsyncs_per_job": synced["fsyncs"] / n} if count_fsyncs else {}),
                "statuses": statuses,
                "worker_cpu_us_per_job": cpu["workers"] / n * 1e6,
                "worker_os_threads": threads,
                "redis_cpu_us_per_job": cpu["redis"] / n * 1e6,
                "other_cores": max(0.0, cpu["machine"] - cpu["workers"] - cpu["redis"]) / done_wall,
                **redis_work_per_job(
                    before, after, n, harness_calls=POLL_CALLS[kind] * (polls + 1) + 2
                ),
            }
            if kind == "ours":
                states = payment_states(client)
                result["payment_states"] = {k: v for k, v in states.items() if v}
                result["fulfilled"] = states.get("fulfilled", 0)
                result["attempts"] = int(client.hget(keys.STATS, "attempts_started") or 0)
                if result["fulfilled"] != n or result["attempts"] != n:
                    log(f"  WARNING: {n} payments, {result['attempts']} attempts: {states}")
            client.close()
            return result

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
