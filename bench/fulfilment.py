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

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import postgres
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
from bench.events import EventFactory
from bench.latency import first_fulfilled
from bench.recording import recorder
from bench.stats import alternate, column, ratio_runs, spread, target
from ledger.setting_kinds import parse_action
from ledger.stored import text

QUEUE = "fulfilment"
FORK = "rq.worker.Worker"
NOOP_ACTION = "bench.trivial:noop_action"
HELD = "bench:held"
RELEASE = """
local ids = redis.call('LRANGE', KEYS[1], 0, -1)
for i = 1, #ids, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ids, i, math.min(i + 999, #ids)))
end
redis.call('DEL', KEYS[1])
return #ids
"""


def _rq_time(raw: bytes | None) -> float | None:
    if not raw:
        return None
    stamp = datetime.strptime(raw.decode(), "%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.replace(tzinfo=UTC).timestamp()


def redis_work_per_job(
    before: dict[str, Any], after: dict[str, Any], n: int, harness_calls: int
) -> dict[str, float]:
    """Redis commands and round trips (read events) per job, the harness's own polls taken
    out: RQ's bookkeeping and ours are counted the same way."""
    commands = after["total_commands_processed"] - before["total_commands_processed"]
    reads = after["total_reads_processed"] - before["total_reads_processed"]
    return {
        "redis_commands_per_job": (commands - harness_calls) / n,
        "redis_round_trips_per_job": (reads - harness_calls) / n,
    }


class Fulfilment:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.runs = 3 if quick else 5
        self.n_simple = 200 if quick else 400
        self.n_fork = 12 if quick else 20  # ~6 jobs/s: more would only lengthen the run
        self.wd = Workdir.make("fulfil")
        self.factory = EventFactory(seed=3)

    def close(self) -> None:
        self.wd.remove()

    def _drain(self, redis: RedisServer, env: dict[str, str], kind: str, worker_class: str, n: int):
        def run(_round: int) -> dict[str, Any]:
            client = redis.client()
            client.flushdb()
            action = parse_action(env["FULFILMENT_ACTION"])
            if action.scheme == "sqlite":  # each round starts with an empty order table
                for suffix in ("", "-wal", "-shm"):
                    Path(action.target + suffix).unlink(missing_ok=True)
            if action.scheme == "postgresql":
                postgres.reset(action.target)
            if kind == "ours":
                record = recorder(env)
                for payment in self.factory.payments(n):
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
                before = client.info("stats")
                released = time.time()
                client.eval(RELEASE, 2, HELD, queue_key)
                finished = f"rq:finished:{QUEUE}"
                deadline = time.monotonic() + 300
                polls = 0
                while client.zcard(finished) + client.zcard(f"rq:failed:{QUEUE}") < n:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"drain of {n} {kind} jobs did not finish")
                    polls += 1
                    time.sleep(0.01)
                done_wall = time.time() - released
                cpu = meter.stop()
                after = client.info("stats")
            finally:
                for p in procs:
                    stop(p)
            with client.pipeline(transaction=False) as pipe:
                for job_id in job_ids:
                    pipe.hmget(f"rq:job:{job_id}", ["started_at", "ended_at", "status"])
                rows = pipe.execute()
            starts = [t for t in (_rq_time(r[0]) for r in rows if r[0]) if t is not None]
            ends = [t for t in (_rq_time(r[1]) for r in rows if r[1]) if t is not None]
            statuses: dict[str, int] = {}
            for r in rows:
                key = (r[2] or b"?").decode()
                statuses[key] = statuses.get(key, 0) + 1
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
                "statuses": statuses,
                "worker_cpu_us_per_job": cpu["workers"] / n * 1e6,
                "redis_cpu_us_per_job": cpu["redis"] / n * 1e6,
                "other_cores": max(0.0, cpu["machine"] - cpu["workers"] - cpu["redis"]) / done_wall,
                **redis_work_per_job(before, after, n, harness_calls=2 * (polls + 1) + 2),
            }
            if kind == "ours":
                states = payment_states(client)
                result["payment_states"] = {k: v for k, v in states.items() if v}
                result["fulfilled"] = states.get("fulfilled", 0)
                if result["fulfilled"] != n:
                    log(f"  WARNING: {result['fulfilled']} of {n} payments fulfilled: {states}")
            client.close()
            return result

        return run

    def drain(self) -> dict[str, Any]:
        log("fulfilment: drain")
        database, url = postgres.start()
        with Stack() as st:
            st.callback(database.remove)
            redis = st.start(RedisServer(self.wd.sub("redis-drain")))
            # RQ keeps finished jobs (its start/end times time the drain), as for the no-op jobs.
            env = {**service_env(redis.url, self.wd.path), "RQ_RESULT_TTL": "3600"}
            # The same ledger work with a downstream that does nothing: the SQLite effect's
            # own commit (an fsync) apart.
            free = {**env, "FULFILMENT_ACTION": NOOP_ACTION, "FULFILMENT_REPLAY_SAFE": "1"}
            pg = {**env, "FULFILMENT_ACTION": url, "FULFILMENT_SQL": postgres.ORDER_SQL}
            variants = {
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
            runs = alternate(variants, self.runs)
        rate = {name: column(rs, "rate") for name, rs in runs.items()}
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
            "ratios": {
                "ours/trivial SimpleWorker": ratio_runs(
                    rate["ours 2xSimpleWorker"], rate["trivial 2xSimpleWorker"]
                ),
                "ours PostgreSQL/ours SQLite SimpleWorker": ratio_runs(
                    rate["ours, PostgreSQL action, 2xSimpleWorker"], rate["ours 2xSimpleWorker"]
                ),
                "ours no-op downstream/trivial SimpleWorker": ratio_runs(
                    rate["ours, no-op downstream, 2xSimpleWorker"], rate["trivial 2xSimpleWorker"]
                ),
                "ours SimpleWorker/fork Worker": ratio_runs(
                    rate["ours 2xSimpleWorker"], rate["ours 2xWorker(fork)"]
                ),
                "ours/trivial fork Worker": ratio_runs(
                    rate["ours 2xWorker(fork)"], rate["trivial 2xWorker(fork)"]
                ),
            },
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
    ]


def run(quick: bool = False) -> dict[str, Any]:
    bench = Fulfilment(quick)
    try:
        drain = bench.drain()
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
