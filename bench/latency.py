"""Section 3b: first paid delivery -> fulfilled, with the shipped stack (gunicorn, 2 x
SimpleWorker, sweeper) receiving whole payments over HTTP at half of the pipeline's peak.
For each payment the ledger itself records the two times (``paid_at``, ``fulfilled_at``,
Redis clock), so the figure is what the payment record says, not a client's guess.
"""

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
    payment_states,
    rq_worker,
    service_env,
    spawn,
)
from bench.events import EventFactory, Pool, write_pool
from bench.stats import column, pct, spread
from ledger import keys


def first_fulfilled(
    wd: Workdir, factory: EventFactory, quick: bool, drain_rate: float
) -> dict[str, Any]:
    """First paid delivery -> fulfilled at half of the pipeline's peak, over HTTP."""
    log("fulfilment: latency at half load")
    runs = 3 if quick else 5
    seconds = 2.0 if quick else 3.0
    with Stack() as st:
        redis = st.start(RedisServer(wd.sub("redis-latency")))
        env = service_env(redis.url, wd.path)
        web = st.start(Gunicorn(env, log=wd.path / "latency-web.log"))
        workers = [st.popen(rq_worker(env, SIMPLE, burst=False)) for _ in range(2)]
        sweeper = st.popen(spawn([str(BIN / "webhook-ledger"), "sweep", "--loop"], env, None))

        def stack_pids() -> list[int]:
            """Web, workers and sweeper, metered together: 'other cores' is then not ours."""
            return [*web.pids(), *(p.pid for p in [*workers, sweeper])]

        client = redis.client()
        # The pipeline's intake peak with the workers running (3 s of whole payments).
        peak_payments = factory.payments(3000)
        peak_pool = Pool(
            wd.path / "peak.bin",
            [b for p in peak_payments for b in p.bodies],
            env["STRIPE_WEBHOOK_SECRET"],
        )
        load.warm_up(web, peak_pool)
        client.flushdb()
        peak = load.peak(web.port, web.pids, redis.pid, peak_pool.fresh(), 3.0)
        per_payment = len(peak_pool.bodies) / len(peak_payments)
        intake_payments = peak["rps"] / per_payment
        half = 0.5 * min(drain_rate, intake_payments)
        log(
            f"  intake peak {peak['rps']:.0f} events/s = {intake_payments:.0f} payments/s; "
            f"drain {drain_rate:.0f}/s -> half load {half:.0f} payments/s"
        )
        wait_idle(client)
        results = []
        for round_no in range(runs):
            n_pay = max(10, int(half * seconds))
            payments = factory.payments(n_pay)
            bodies = [b for p in payments for b in p.bodies]
            pool = wd.path / f"latency-{round_no}.bin"
            write_pool(pool, bodies, env["STRIPE_WEBHOOK_SECRET"])
            rate = half * len(bodies) / n_pay
            sent = load.paced(web.port, stack_pids, redis.pid, pool, rate, len(bodies) / rate)
            deadline = time.monotonic() + 60
            pay_keys = [keys.payment(p.key) for p in payments]
            while True:
                with client.pipeline(transaction=False) as pipe:
                    for k in pay_keys:
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


def wait_idle(client) -> None:
    """Until no payment is queued or in progress (at most 120 s). A payment whose paid event
    the load run cut off stays ``pending`` for ever, so pending ones are not waited for."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        states = payment_states(client)
        if not states.get("queued") and not states.get("in_progress"):
            return
        time.sleep(0.1)
    log("  WARNING: backlog not drained after 120 s")
