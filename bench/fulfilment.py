"""Section 3: fulfilment throughput and latency.

Drain: N payments are recorded through the real ledger (``Ledger.record_delivery``, all
of each payment's events) with no worker running, which queues one real RQ job per
payment. The queue is then held aside, the workers are started and left to go idle,
and the whole queue is released in one Redis command, so every worker starts at once
with its imports done. The drain ends when RQ has finished every job. Compared with
the same number of trivial RQ jobs (``bench.trivial.noop``) drained by the same worker
class and count, and with the default forking ``rq.worker.Worker``.

Latency: the shipped stack (gunicorn, 2 x SimpleWorker, sweeper) receives whole
payments over HTTP at half of the pipeline's peak; for each payment the ledger records
first paid delivery -> fulfilled (``fulfilled_at - paid_at``, Redis clock).

    .venv/bin/python -m bench.fulfilment [--quick]
"""

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import load
from bench.common import (
    BIN,
    RESULTS,
    CpuMeter,
    Gunicorn,
    RedisServer,
    Stack,
    Workdir,
    alternate,
    column,
    log,
    pct,
    ratio_runs,
    rq_worker,
    service_env,
    spawn,
    spread,
    stop,
    target,
    write_json,
)
from bench.events import EventFactory, Pool, write_pool

QUEUE = "fulfilment"
SIMPLE = "rq.worker.SimpleWorker"
FORK = "rq.worker.Worker"
HELD = "bench:held"
RELEASE = """
local ids = redis.call('LRANGE', KEYS[1], 0, -1)
for i = 1, #ids, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ids, i, math.min(i + 999, #ids)))
end
redis.call('DEL', KEYS[1])
return #ids
"""


def recorder(env: dict[str, str]):  # noqa: ANN201
    """A function that records one event body through the real ledger, as the view does."""
    import orjson
    from redis import Redis

    from webhook.events import classify
    from webhook.ledger import Delivery, Ledger, new_request_id
    from webhook.settings import load as load_settings

    settings = load_settings(environ=env)
    ledger = Ledger(Redis.from_url(env["REDIS_URL"]), settings)

    def record(body: bytes) -> None:
        event = orjson.loads(body)
        ledger.record_delivery(
            Delivery(
                event=event,
                body=body,
                classified=classify(event, settings.PAID_EVENT_TYPES),
                secret_index=0,
                source="stripe",
                request_id=new_request_id(),
            )
        )

    return record


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
        self.n_fork = 20 if quick else 30
        self.wd = Workdir.make("fulfil")
        self.factory = EventFactory(seed=3)

    def close(self) -> None:
        self.wd.remove()

    def _drain(self, redis: RedisServer, env: dict[str, str], kind: str, worker_class: str, n: int):  # noqa: ANN202
        def run(_round: int) -> dict[str, Any]:
            client = redis.client()
            client.flushdb()
            db = Path(env["FULFILMENT_ACTION"].removeprefix("sqlite:///"))
            for suffix in ("", "-wal", "-shm"):
                Path(str(db) + suffix).unlink(missing_ok=True)
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
            job_ids = [j.decode() for j in client.lrange(queue_key, 0, -1)]
            assert len(job_ids) == n, (len(job_ids), n)
            client.rename(queue_key, HELD)
            procs = [rq_worker(env, worker_class, burst=False) for _ in range(2)]
            try:
                deadline = time.monotonic() + 30
                while client.scard(f"rq:workers:{QUEUE}") < 2:
                    if time.monotonic() > deadline:
                        raise RuntimeError("rq workers did not register")
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
                states = {
                    k.decode(): int(v) for k, v in client.hgetall("wl:payments:by_state").items()
                }
                result["payment_states"] = {k: v for k, v in states.items() if v}
                result["fulfilled"] = states.get("fulfilled", 0)
                if result["fulfilled"] != n:
                    log(f"  WARNING: {result['fulfilled']} of {n} payments fulfilled: {states}")
            client.close()
            return result

        return run

    def drain(self) -> dict[str, Any]:
        log("fulfilment: drain")
        with Stack() as st:
            redis = st.start(RedisServer(self.wd.sub("redis-drain")))
            # RQ keeps finished jobs (its start/end times time the drain), as for the no-op jobs.
            env = {**service_env(redis.url, self.wd.path), "RQ_RESULT_TTL": "3600"}
            variants = {
                "ours 2xSimpleWorker": self._drain(redis, env, "ours", SIMPLE, self.n_simple),
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
                "ours SimpleWorker/fork Worker": ratio_runs(
                    rate["ours 2xSimpleWorker"], rate["ours 2xWorker(fork)"]
                ),
                "ours/trivial fork Worker": ratio_runs(
                    rate["ours 2xWorker(fork)"], rate["trivial 2xWorker(fork)"]
                ),
            },
        }

    def latency(self, drain_rate: float) -> dict[str, Any]:
        """First paid delivery -> fulfilled at half of the pipeline's peak, over HTTP."""
        log("fulfilment: latency at half load")
        runs = 3 if self.quick else 5
        seconds = 2.0 if self.quick else 3.0
        with Stack() as st:
            redis = st.start(RedisServer(self.wd.sub("redis-latency")))
            env = service_env(redis.url, self.wd.path)
            web = st.start(Gunicorn(env, logfile=self.wd.path / "latency-web.log"))
            workers = [st.popen(rq_worker(env, SIMPLE, burst=False)) for _ in range(2)]
            st.popen(spawn([str(BIN / "webhook-ledger"), "sweep", "--loop"], env, None))
            client = redis.client()
            # The pipeline's intake peak with the workers running (3 s of whole payments).
            peak_payments = self.factory.payments(3000)
            peak_pool = Pool(
                self.wd.path / "peak.bin",
                [b for p in peak_payments for b in p.bodies],
                env["STRIPE_WEBHOOK_SECRET"],
            )
            load.peak(web.port, web.pids, None, peak_pool.fresh(), 1.0)
            client.flushdb()
            peak = load.peak(web.port, web.pids, redis.proc.pid, peak_pool.fresh(), 3.0)
            per_payment = len(peak_pool.bodies) / len(peak_payments)
            intake_payments = peak["rps"] / per_payment
            half = 0.5 * min(drain_rate, intake_payments)
            log(
                f"  intake peak {peak['rps']:.0f} events/s = {intake_payments:.0f} payments/s; "
                f"drain {drain_rate:.0f}/s -> half load {half:.0f} payments/s"
            )
            self._wait_idle(client)
            results = []
            for round_no in range(runs):
                n_pay = max(10, int(half * seconds))
                payments = self.factory.payments(n_pay)
                bodies = [b for p in payments for b in p.bodies]
                pool = self.wd.path / f"latency-{round_no}.bin"
                write_pool(pool, bodies, env["STRIPE_WEBHOOK_SECRET"])
                rate = half * len(bodies) / n_pay
                sent = load.paced(
                    web.port, web.pids, redis.proc.pid, pool, rate, len(bodies) / rate
                )
                deadline = time.monotonic() + 60
                keys = [f"wl:pay:{p.key}" for p in payments]
                while True:
                    with client.pipeline(transaction=False) as pipe:
                        for k in keys:
                            pipe.hmget(k, ["paid_at", "fulfilled_at"])
                        got = [
                            int(done) - int(paid) if paid and done else None
                            for paid, done in pipe.execute()
                        ]
                    if all(v is not None for v in got) or time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
                lat = [float(v) for v in got if v is not None]
                result = {
                    "payments": n_pay,
                    "payments_per_s": half,
                    "events_per_s": rate,
                    "fulfilled": len(lat),
                    "p50_ms": pct(lat, 50),
                    "p99_ms": pct(lat, 99),
                    "max_ms": max(lat) if lat else float("nan"),
                    "http_p99_ms": sent["p99_ms"],
                    "http_errors": sent["errors"],
                    "other_cores": sent["other_cores"],
                }
                results.append(result)
                log(
                    f"  round {round_no + 1}/{runs}: {len(lat)}/{n_pay} fulfilled, "
                    f"p50 {result['p50_ms']:.0f} ms p99 {result['p99_ms']:.0f} ms"
                )
            client.close()
            del workers
        return {
            "intake_peak_events_per_s": peak["rps"],
            "events_per_payment": per_payment,
            "intake_peak_payments_per_s": intake_payments,
            "drain_payments_per_s": drain_rate,
            "half_load_payments_per_s": half,
            "runs": results,
            "summary": {
                m: spread(column(results, m))
                for m in ("p50_ms", "p99_ms", "max_ms", "http_p99_ms", "other_cores")
            },
        }

    @staticmethod
    def _wait_idle(client) -> None:  # noqa: ANN001
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            states = {k.decode(): int(v) for k, v in client.hgetall("wl:payments:by_state").items()}
            if (
                not states.get("queued")
                and not states.get("in_progress")
                and not states.get("pending")
            ):
                return
            time.sleep(0.1)
        log("  WARNING: backlog not drained after 120 s")


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    r = result["drain"]["ratios"]
    return [
        target(
            "3. ours / trivial RQ job rate (2 x SimpleWorker)",
            r["ours/trivial SimpleWorker"]["ratio_of_medians"],
            0.8,
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
        latency = bench.latency(rate)
    finally:
        bench.close()
    result = {
        "section": "fulfilment",
        "quick": quick,
        "config": {
            "runs": bench.runs,
            "payments_simple": bench.n_simple,
            "payments_fork": bench.n_fork,
            "action": "built-in SQLite (sqlite:///...downstream.sqlite3)",
            "redis": "config/redis.conf (appendfsync always)",
        },
        "drain": drain,
        "latency": latency,
    }
    result["targets"] = targets(result)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Fulfilment benchmarks (section 3)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS / "fulfilment.json")
    args = p.parse_args(argv)
    write_json(args.out, run(args.quick))
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
