"""Sections 2 and 5b: ours over HTTP with Redis ``appendfsync always`` (shipped) vs
``everysec``, and with 1, 2 and 4 gunicorn workers. Same load and pool as section 1
(``bench/intake.py``), which runs these.
"""

from typing import TYPE_CHECKING, Any

from bench import load
from bench.common import Gunicorn, RedisServer, Stack, log, service_env
from bench.load import summarise
from bench.stats import alternate, ratios

if TYPE_CHECKING:
    from bench.intake import Intake


def durability(bench: "Intake") -> dict[str, Any]:
    """Section 2: the shipped appendfsync always vs everysec (gthread, 2 workers)."""
    log("intake: durability (appendfsync always vs everysec)")
    with Stack() as st:
        servers = {}
        redises = {}
        for mode in ("always", "everysec"):
            redises[mode] = st.start(RedisServer(bench.wd.sub(f"redis-{mode}"), appendfsync=mode))
            env = service_env(redises[mode].url, bench.wd.path)
            servers[mode] = st.start(Gunicorn(env, log=bench.wd.path / f"ours-{mode}.log"))
            load.warm_up(servers[mode], bench.pool)
        runs = alternate(
            {m: bench.peak_run(servers[m], redises[m], bench.pool, True) for m in servers},
            bench.runs,
        )
    return {
        "runs": runs,
        "summary": summarise(runs),
        "ratios": ratios(runs, {"always/everysec rps": ("always", "everysec")}),
    }


def gunicorn_workers(bench: "Intake") -> dict[str, Any]:
    """Section 5b: ours with 1, 2 and 4 gunicorn workers (gthread, 4 threads each)."""
    log("intake: 1, 2 and 4 gunicorn workers")
    with Stack() as st:
        redis = st.start(RedisServer(bench.wd.sub("redis-workers")))
        env = service_env(redis.url, bench.wd.path)
        servers = {}
        for n in (1, 2, 4):
            servers[f"{n} worker{'s' if n > 1 else ''}"] = st.start(
                Gunicorn(env, workers=n, log=bench.wd.path / f"ours-w{n}.log")
            )
        for server in servers.values():
            load.warm_up(server, bench.pool)
        runs = alternate(
            {name: bench.peak_run(s, redis, bench.pool, True) for name, s in servers.items()},
            bench.runs,
        )
    return {
        "runs": runs,
        "summary": summarise(runs),
        "ratios": ratios(runs, {f"{name}/1 worker rps": (name, "1 worker") for name in runs}),
    }
