"""What one Redis primary at ``appendfsync always`` carries end to end, beside its fsync bound.

The shipped stack (gunicorn, 2 fulfilment workers, sweeper) on one primary with
config/redis.conf receives whole payments over HTTP at a fixed rate, step after step (each
``STEP_SECONDS``, rates rising), with an instant downstream (``bench.trivial:noop_action``):
a step is *sustained* when the generator kept its rate, no delivery was refused and every
payment it sent is fulfilled within ``SETTLE_SECONDS`` of its end: the backlog never grew
past a second's work. The workers are RQ's
``SimpleWorker`` one call at a time (the worker before ``BatchWorker``) or ``BatchWorker``
with FULFILMENT_CONCURRENCY=16, variants alternating. Beside it, the same Redis
configuration's own bound: ``redis-benchmark`` SETs from one client (a bare SET loop: one
fsync each) and from 50 (fsyncs shared by the writes of one event-loop turn).

Then first paid delivery -> fulfilled (the ledger's ``paid_at``, ``fulfilled_at``) with a
downstream answering in 100 ms, at half of the BatchWorker's sustained rate, with
``LATENCY_SLOTS`` slots per worker (a call in flight per payment/s x 0.1 s, and room).

    .venv/bin/python -m bench.primary [--quick]
"""

import subprocess
import sys
import time
from typing import Any

from bench import load
from bench.common import (
    BIN,
    SIMPLE,
    Gunicorn,
    RedisServer,
    Stack,
    Workdir,
    log,
    rq_worker,
    section_main,
    service_env,
    spawn,
)
from bench.downstream import HttpDownstream
from bench.drain import BATCH, NOOP_ACTION, SLOTS
from bench.events import EventFactory, write_pool
from bench.stats import pct, spread, target
from ledger import keys

STEP_SECONDS = 3.0
SETTLE_SECONDS = 1.0
RATES = (10, 25, 50, 100, 200, 300, 400, 600, 800, 1000, 1200)
"""Payments/s of the steps, until one is not sustained."""
QUIET_P99_MS = 250.0
"""A step is also *quiet* when its p99 first paid delivery -> fulfilled stays under this."""
LATENCY_SLOTS = 64
WORKERS = {
    "2xSimpleWorker": (SIMPLE, "1"),
    f"2xBatchWorker({SLOTS})": (BATCH, str(SLOTS)),
    f"2xBatchWorker({LATENCY_SLOTS})": (BATCH, str(LATENCY_SLOTS)),
}
CAPACITY = ("2xSimpleWorker", f"2xBatchWorker({SLOTS})")


def set_bound(port: int, clients: int, n: int) -> float:
    """SETs/s of ``redis-benchmark`` with ``clients`` clients on this server."""
    argv = ["redis-benchmark", "-p", str(port), "-t", "set", "-n", str(n), "-c", str(clients)]
    out = subprocess.run([*argv, "-q", "--csv"], capture_output=True, text=True, timeout=120)
    for line in out.stdout.splitlines():
        fields = [f.strip('"') for f in line.split(",")]
        if fields and fields[0] == "SET":
            return float(fields[1])
    raise RuntimeError(f"redis-benchmark: {out.stdout[-300:]} {out.stderr[-300:]}")


class Service:
    """One primary, the web process, 2 workers of one class and the sweeper."""

    def __init__(self, st: Stack, wd: Workdir, name: str, env_extra: dict[str, str]) -> None:
        worker_class, slots = WORKERS[name]
        self.redis = st.start(RedisServer(wd.sub(f"redis-{name}")))
        env = service_env(self.redis.url, wd.path, {"FULFILMENT_CONCURRENCY": slots})
        self.env = {**env, **env_extra}
        self.web = st.start(Gunicorn(self.env, log=wd.path / f"web-{name}.log"))
        self.workers = [st.popen(rq_worker(self.env, worker_class, burst=False)) for _ in "ab"]
        sweep = [str(BIN / "webhook-ledger"), "sweep", "--loop"]
        self.sweeper = st.popen(spawn(sweep, self.env, None))
        self.client = self.redis.client()
        self.wd = wd

    def pids(self) -> list[int]:
        return [*self.web.pids(), *(p.pid for p in [*self.workers, self.sweeper])]

    def step(self, factory: EventFactory, rate: float, seconds: float) -> dict[str, Any]:
        """``rate`` payments/s for ``seconds``; how many were fulfilled by SETTLE_SECONDS
        after, and their first paid delivery -> fulfilled times."""
        payments = factory.payments(max(10, int(rate * seconds)))
        bodies = [b for p in payments for b in p.bodies]
        pool = self.wd.path / "step.bin"
        write_pool(pool, bodies, self.env["STRIPE_WEBHOOK_SECRET"])
        events_rate = rate * len(bodies) / len(payments)
        sent = load.paced(
            self.web.port, self.pids, self.redis.pid, pool, events_rate, len(bodies) / events_rate
        )
        pay_keys = [keys.payment(p.key) for p in payments]
        settle_by = time.monotonic() + SETTLE_SECONDS
        while True:
            with self.client.pipeline(transaction=False) as pipe:
                for k in pay_keys:
                    pipe.hmget(k, ["paid_at", "fulfilled_at"])
                rows = pipe.execute()
            lat = [int(done) - int(paid) for paid, done in rows if paid and done]
            if len(lat) == len(payments) or time.monotonic() > settle_by:
                break
            time.sleep(0.1)
        return {
            "payments_per_s": rate,
            "payments": len(payments),
            "fulfilled": len(lat),
            "http_errors": sent["errors"],
            "sustained": len(lat) == len(payments)
            and not sent["errors"]
            and sent["achieved_rate"] >= 0.95 * events_rate,
            "achieved_events_per_s": sent["achieved_rate"],
            "redis_cpu_us_per_payment": sent["redis_cpu_us_per_req"] * len(bodies) / len(payments),
            "stack_cores": sent["server_cores"],
            "other_cores": sent["other_cores"],
            "p50_ms": pct([float(v) for v in lat], 50),
            "p99_ms": pct([float(v) for v in lat], 99),
        }

    def wait_idle(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            counts = self.client.hmget(keys.PAYMENT_STATE_COUNTS, ["queued", "in_progress"])
            if not any(int(c or 0) for c in counts):
                return
            time.sleep(0.2)


def sustained(wd: Workdir, factory: EventFactory, name: str, rounds: int) -> dict[str, Any]:
    """The highest step each round sustained, rates rising until one is not."""
    with Stack() as st:
        service = Service(st, wd, name, {"FULFILMENT_ACTION": NOOP_ACTION})
        bound = {f"set_{c}_clients_per_s": set_bound(service.redis.port, c, 3000) for c in (1, 50)}
        service.client.flushdb()
        best, quiet, steps = [], [], []
        for round_no in range(rounds):
            top = calm = 0.0
            loud = False
            for rate in RATES:
                result = service.step(factory, rate, STEP_SECONDS)
                steps.append({**result, "round": round_no})
                log(f"  {name} round {round_no + 1}: {rate}/s -> {result['fulfilled']}"
                    f"/{result['payments']} fulfilled, errors {result['http_errors']}")  # fmt: skip
                service.wait_idle()
                if not result["sustained"]:
                    break
                top = rate
                loud = loud or result["p99_ms"] > QUIET_P99_MS
                calm = calm if loud else rate
            best.append(top)
            quiet.append(calm)
    return {
        "sustained_payments_per_s": spread(best),
        "quiet_payments_per_s": spread(quiet),
        "steps": steps,
        "fsync_bound": bound,
    }


def latency_at(wd: Workdir, factory: EventFactory, name: str, rate: float, runs: int) -> dict:
    """First paid delivery -> fulfilled at ``rate`` with a downstream answering in 100 ms."""
    with Stack() as st:
        slow = st.start(HttpDownstream(100))
        service = Service(st, wd, name, {"FULFILMENT_ACTION": slow.url})
        service.step(factory, min(rate, 20), 1.0)  # warm: imports, connections
        results = [service.step(factory, rate, STEP_SECONDS) for _ in range(runs)]
    return {
        "payments_per_s": rate,
        "runs": results,
        "summary": {m: spread(r[m] for r in results) for m in ("p50_ms", "p99_ms")},
        "all_fulfilled": all(r["sustained"] for r in results),
    }


def run(quick: bool = False) -> dict[str, Any]:
    wd = Workdir.make("primary")
    factory = EventFactory(seed=11)
    rounds = 1 if quick else 3
    try:
        capacity = {name: sustained(wd, factory, name, rounds) for name in CAPACITY}
        half = {n: c["sustained_payments_per_s"]["median"] / 2 for n, c in capacity.items()}
        latency = {  # today's worker at half its own rate beside the new one at half its own
            # (the lower of half its sustained rate and half what a 100 ms downstream allows)
            # One call at a time: 2 workers x (1 s / 100 ms) = 20 payments/s at most, half is 10.
            CAPACITY[0]: latency_at(wd, factory, CAPACITY[0], min(half[CAPACITY[0]], 10), rounds),
            f"2xBatchWorker({LATENCY_SLOTS})": latency_at(
                wd, factory, f"2xBatchWorker({LATENCY_SLOTS})", half[CAPACITY[1]], rounds
            ),
        }
    finally:
        wd.remove()
    return {
        "section": "primary",
        "quick": quick,
        "config": {"redis": "config/redis.conf (appendfsync always)", "rates": RATES},
        "capacity": capacity,
        "latency_100ms_downstream_at_half": latency,
        "targets": [
            target(  # 5 x the ~195 payments/s one primary carried with one call per worker
                f"3b. one primary, appendfsync always: sustained payments/s of {CAPACITY[1]}"
                f" (the ladder stops at {RATES[-1]})",
                capacity[CAPACITY[1]]["sustained_payments_per_s"]["median"],
                975.0,
                True,
            )
        ],
    }


if __name__ == "__main__":
    sys.exit(section_main("primary", run, sys.argv[1:]))
