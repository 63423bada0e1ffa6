"""Client CPU of one Redis round trip in a process gevent has patched (the web process),
the shipped client (ledger/connection.py, ``ReadyCheckParser``) beside redis-py's own
hiredis parser, alternating: a probe for the profile section (bench/profile.py).

    .venv/bin/python -m bench.gevent_round_trip REDIS_URL [N]

Prints one JSON object: median µs of CPU (user + sys) per PING over 5 rounds, 16 greenlets
sharing the pool as a gunicorn worker's requests do.
"""


def main() -> None:
    from gevent import monkey

    monkey.patch_all()

    import resource
    import statistics
    import sys

    import gevent
    import orjson
    from redis._parsers import _HiredisParser

    from ledger import connection, settings

    url, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 16_000
    shipped = connection.connect(settings.load({}, REDIS_URL=url))
    stock = connection.connect(settings.load({}, REDIS_URL=url))
    stock.connection_pool.connection_kwargs["parser_class"] = _HiredisParser

    def cpu_us_per_ping(client: object) -> float:
        def pings() -> None:
            for _ in range(n // 16):
                client.ping()  # type: ignore[attr-defined]

        use = resource.getrusage(resource.RUSAGE_SELF)
        gevent.joinall([gevent.spawn(pings) for _ in range(16)])
        after = resource.getrusage(resource.RUSAGE_SELF)
        spent = after.ru_utime + after.ru_stime - use.ru_utime - use.ru_stime
        return spent / n * 1e6

    rounds: dict[str, list[float]] = {"shipped": [], "stock": []}
    for _ in range(5):
        rounds["shipped"].append(cpu_us_per_ping(shipped))
        rounds["stock"].append(cpu_us_per_ping(stock))
    print(orjson.dumps({k: round(statistics.median(v), 1) for k, v in rounds.items()}).decode())


if __name__ == "__main__":
    main()
