"""Section 3 of bench/failover.py: ``record_delivery.lua`` alone, run by redis-benchmark (a C
client, 50 connections) on a primary with two replicas attached and on one Redis, both with
the shipped ``appendfsync always``: how many deliveries one primary can record per second
with no Python client in the way.

The keys and arguments are the ones ``Ledger.record_delivery`` sends for a real event, with
every id (event, request, payment, RQ job) replaced by redis-benchmark's ``__rand_int__``,
so each call is a new event (a paid one: a new payment with its RQ job, the costliest
path). Arguments holding a NUL byte (the compressed payload, the pickled job) go as
base64, a third longer: argv cannot carry NUL.
"""

import base64
import random
import shutil
import subprocess
from typing import Any

from redis import Redis

from bench.common import RedisServer, Stack, Workdir, log
from bench.recording import delivery
from bench.stats import alternate, column, spread
from ledger import keys, settings
from ledger.deliveries import Ledger
from ledgerctl import samples
from tests.support.ha import Cluster

RAND = "__rand_int__"
QUEUE_KEY = keys.rq_queue("fulfilment")


def captured_call(redis: Redis, kind: str) -> tuple[list[str], list[bytes]]:
    """The keys and arguments of one real ``record_delivery`` (a paid event or not)."""
    s = settings.load({}, STRIPE_MODE="test")
    ledger = Ledger(redis, s)
    seen: dict[str, list[Any]] = {}
    script = ledger.record_script

    def capture(key_list: list[Any], args: list[Any], client: Any = None) -> list[Any]:
        seen.update(keys=key_list, args=args)
        return [1, 0, 0, 1, "queued", "pi"]

    script.run = capture  # type: ignore[method-assign,assignment]
    events = samples.payment_events(random.Random(5))
    event = events[2] if kind == "paid" else events[0]
    ledger.record_delivery(delivery(ledger, samples.encode(event)))
    pk = str(event["data"]["object"]["id"])
    job_id = seen["args"][script.arg_names.index("job_id")]
    swaps = {event["id"]: f"evt_{RAND}", pk: f"pi_{RAND}", **({job_id: RAND} if job_id else {})}
    request = script.key_names.index("request")
    named = [
        keys.request(RAND) if i == request else _swap(str(k), swaps)
        for i, k in enumerate(seen["keys"])
    ]
    return named, [_arg(a, swaps) for a in seen["args"]]


def _swap(text: str, swaps: dict[str, str]) -> str:
    for old, new in swaps.items():
        text = text.replace(old, new)
    return text


def _arg(value: Any, swaps: dict[str, str]) -> bytes:
    raw = value if isinstance(value, bytes) else str(value).encode()
    if b"\0" in raw:
        return base64.b64encode(raw)
    return _swap(raw.decode("utf-8", "surrogateescape"), swaps).encode("utf-8", "surrogateescape")


def benchmark(port: int, sha: str, keys: list[str], args: list[bytes], n: int) -> float:
    """redis-benchmark's requests per second for EVALSHA of the script with these."""
    exe = shutil.which("redis-benchmark")
    assert exe is not None, "redis-benchmark comes with redis-server (redis-tools)"
    argv: list[str | bytes] = [exe, "-p", str(port), "-c", "50", "-n", str(n), "-r", "1000000000"]
    argv += ["--csv", "EVALSHA", sha, str(len(keys)), *keys, *args]
    # The CSV's first column is the command with its arguments, raw bytes unescaped (quotes,
    # newlines): the figures are read from the right of the output, seven numbers.
    done = subprocess.run(argv, capture_output=True, timeout=300, check=True)
    fields = done.stdout.decode("latin-1").rstrip().rsplit(",", 7)[1:]
    rps, *_latencies = (float(f.strip('"')) for f in fields)
    return rps


def script_throughput(wd: Workdir, runs: int, n: int = 8000) -> dict[str, Any]:
    log("failover: record_delivery.lua alone (redis-benchmark, 50 connections)")
    with Stack() as st:
        cluster = Cluster(wd.sub("ha-script"))
        st.callback(cluster.close)
        cluster.start()
        single = st.start(RedisServer(wd.sub("single-script")))
        targets = {"primary + 2 replicas": cluster.primary(), "one Redis": single.port}
        clients = {name: Redis(port=port) for name, port in targets.items()}
        calls = {kind: captured_call(clients["one Redis"], kind) for kind in ("paid", "info")}
        script = Ledger(clients["one Redis"], settings.load({})).record_script.registered.script
        shas = {name: c.script_load(script) for name, c in clients.items()}

        def variant(name: str, kind: str) -> Any:
            def once(_round: int) -> dict[str, Any]:
                redis = clients[name]
                redis.flushall()
                errors = redis.info("stats")["total_error_replies"]
                key_list, args = calls[kind]
                rate = benchmark(targets[name], shas[name], key_list, args, n)
                assert redis.info("stats")["total_error_replies"] == errors, "the script refused"
                # A few calls may draw a request id already drawn (a replayed answer).
                recorded = int(redis.hget(keys.STATS, "deliveries") or 0)
                return {"rate": rate, "recorded": recorded, "queued": redis.llen(QUEUE_KEY)}

            return once

        variants = {f"{name}, {kind}": variant(name, kind) for name in targets for kind in calls}
        results = alternate(variants, runs)
        for c in clients.values():
            c.close()
    return {"runs": results, "summary": {k: spread(column(v, "rate")) for k, v in results.items()}}
