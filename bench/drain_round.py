"""One round of a section 3 drain variant, timed: N payments recorded through the real ledger
(or N no-op RQ jobs), the queue held aside while two workers start and go idle, released in
one Redis command, and the round's rates, CPU and Redis work per job read once RQ finished
every job.

Apart from bench/fulfilment.py, which names the variants (worker class, downstream, count)
and runs them in alternating rounds; this is what each of them does in one round.
"""

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import fsyncs, postgres
from bench.common import RedisServer, log, payment_states, rq_worker, stop
from bench.cpu import CpuMeter
from bench.drain import HELD, POLL_CALLS, QUEUE, RELEASE, done, end_times, redis_work_per_job
from bench.events import EventFactory
from bench.gevent_drain import GEVENT, gevent_rq_worker, os_threads
from bench.recording import recorder
from ledger import keys
from ledger.setting_urls import parse_action
from ledger.stored import text


def drain_round(
    redis: RedisServer,
    env: dict[str, str],
    kind: str,
    worker_class: str,
    n: int,
    factory: EventFactory,
    count_fsyncs: bool = False,
) -> dict[str, Any]:
    """One drain of ``n`` jobs, ``ours`` (payments from ``factory``) or ``trivial``, by two
    ``worker_class`` workers; with ``count_fsyncs`` its Redis fsyncs are counted (strace:
    untimed)."""
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
        for payment in factory.payments(n):
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
        synced = tracing.enter_context(fsyncs.counting(redis_proc.pid)) if count_fsyncs else {}
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
        **redis_work_per_job(before, after, n, harness_calls=POLL_CALLS[kind] * (polls + 1) + 2),
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
