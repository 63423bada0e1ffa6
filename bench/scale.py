"""Section 5a: the cost of one delivery with 10,000 vs 1,000,000 events in the ledger.

Two Redis servers are filled with the real ``record_delivery.lua`` run server-side
(bench/recording.py ``Filler``: 3 events per payment, new events of the real schema),
one to 10,000 and one to 1,000,000 events. Then, alternating between them, fresh
realistic payments are recorded through ``Ledger.record_delivery`` one at a time from
one client: the wall time of each call (client work + round trip + script) and the
server-side time of the script (``INFO commandstats`` usec per call of its FCALL).

Both servers run ``appendonly no``: the fsync per write is a constant cost measured
in section 2, and a million-event preload would otherwise write and rewrite a
multi-GB AOF during the run.

    .venv/bin/python -m bench.scale [--quick]
"""

import sys
import time
from typing import Any

from bench.common import (
    RedisServer,
    Stack,
    Workdir,
    log,
    section_main,
    service_env,
)
from bench.events import EventFactory
from bench.recording import Filler, delivery, ledger_for
from bench.stats import alternate, column, pct, ratio_runs, spread, target


def _script_time(client) -> tuple[int, int]:
    """Calls and server time of the ledger's scripts: record_delivery is an FCALL (a Redis
    Function), the filler's loop an EVALSHA."""
    stats = client.info("commandstats")
    rows = [stats.get(f"cmdstat_{c}", {"calls": 0, "usec": 0}) for c in ("evalsha", "fcall")]
    return sum(int(r["calls"]) for r in rows), sum(int(r["usec"]) for r in rows)


def run(quick: bool = False) -> dict[str, Any]:
    small, large = 10_000, (200_000 if quick else 1_000_000)
    per_run = 300 if quick else 600
    runs = 5
    wd = Workdir.make("scale")
    factory = EventFactory(seed=7)
    try:
        with Stack() as st:
            servers = {}
            ledgers = {}
            fill_seconds = {}
            for n in (small, large):
                name = f"{n:,} events"
                servers[name] = st.start(
                    RedisServer(wd.sub(f"redis-{n}"), appendonly="no", extra=["--save", ""])
                )
                env = service_env(servers[name].url, wd.path)
                filler = Filler(env, factory.payment().bodies[0])
                log(f"scale: filling {n:,} events")
                started = time.perf_counter()
                filler.fill(0, n)
                fill_seconds[name] = time.perf_counter() - started
                ledgers[name] = ledger_for(env)
            memory = {name: s.client().info("memory")["used_memory"] for name, s in servers.items()}
            keys = {name: s.client().dbsize() for name, s in servers.items()}

            def measure(name: str):
                def one(_round: int) -> dict[str, Any]:
                    ledger = ledgers[name]
                    bodies = factory.events(per_run)
                    ds = [delivery(ledger, b) for b in bodies]
                    client = servers[name].client()
                    calls0, usec0 = _script_time(client)
                    times = []
                    for d in ds:
                        t = time.perf_counter()
                        ledger.record_delivery(d)
                        times.append((time.perf_counter() - t) * 1e6)
                    calls1, usec1 = _script_time(client)
                    client.close()
                    return {
                        "deliveries": len(ds),
                        "us_per_call": pct(times, 50),
                        "p99_us": pct(times, 99),
                        "server_us_per_call": (usec1 - usec0) / max(1, calls1 - calls0),
                    }

                return one

            results = alternate({name: measure(name) for name in servers}, runs)
    finally:
        wd.remove()
    a, b = f"{large:,} events", f"{small:,} events"
    summary = {
        name: {m: spread(column(rs, m)) for m in ("us_per_call", "p99_us", "server_us_per_call")}
        for name, rs in results.items()
    }
    ratios = {
        "wall per delivery": ratio_runs(
            column(results[a], "us_per_call"), column(results[b], "us_per_call")
        ),
        "script time per delivery": ratio_runs(
            column(results[a], "server_us_per_call"), column(results[b], "server_us_per_call")
        ),
    }
    result = {
        "section": "scale",
        "quick": quick,
        "sizes": [small, large],
        "fill_seconds": fill_seconds,
        "used_memory": memory,
        "keys": keys,
        "runs": results,
        "summary": summary,
        "ratios": ratios,
        "config": {"redis": "config/redis.conf with appendonly no", "per_run": per_run},
    }
    result["targets"] = [
        target(
            f"5. delivery cost at {large:,} / {small:,} events (wall)",
            ratios["wall per delivery"]["ratio_of_medians"],
            1.2,
            False,
        ),
        target(
            f"5. script time at {large:,} / {small:,} events (Redis)",
            ratios["script time per delivery"]["ratio_of_medians"],
            1.2,
            False,
        ),
    ]
    return result


if __name__ == "__main__":
    sys.exit(section_main("scale", run, sys.argv[1:]))
