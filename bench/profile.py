"""Where the time goes: py-spy profiles of the receiver and of a fulfilment worker.

Receiver: the shipped stack (gunicorn gthread, 2 workers, Redis with the shipped config)
at peak load from wrk, both gunicorn workers sampled by py-spy (on-CPU samples only).
Worker: one ``rq worker -w rq.worker.SimpleWorker`` draining real fulfilment jobs.
Each sample is put in one bucket by the innermost frame that matches a rule below, so
the buckets add up to 100 % of the process's CPU samples; the share times the measured
CPU per request gives microseconds per request. Raw collapsed stacks are kept in
bench/results/ for flame graphs.

    .venv/bin/python -m bench.profile [--quick]
"""

import argparse
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import load
from bench.common import (
    BIN,
    RESULTS,
    SECRET,
    Gunicorn,
    RedisServer,
    Stack,
    Workdir,
    cpu_seconds,
    log,
    rq_worker,
    service_env,
    stop,
    write_json,
)
from bench.events import EventFactory, Pool
from bench.recording import recorder

# (bucket, regex on "function (file)"); the innermost matching frame decides.
RECEIVER_RULES = [
    (
        "signature check: stripe.WebhookSignature (HMAC-SHA256, header parsing)",
        r"stripe/|webhook/verify\.py",
    ),
    (
        "RQ job built for every paid delivery (enqueue_commands: create_job, pickle, zlib)",
        r"rq/|enqueue_commands",
    ),
    ("payload compression (zlib level 6, compress_payload)", r"compress_payload"),
    ("redis-py EVALSHA: pack, send, wait, parse", r"redis/"),
    ("ledger arguments (sha256, scalars) in record_delivery", r"record_delivery|_scalar|_amount"),
    ("JSON parse + UTF-8 decode (orjson) in parse_event", r"parse_event"),
    (
        "event shape, classify, source",
        r"check_shape|classify|rule_for|delivery_source|webhook/events\.py",
    ),
    ("logging: one JSON line per delivery", r"logging/|log\.info"),
    ("Prometheus metrics", r"prometheus_client|webhook/metrics\.py"),
    ("reading the body (read_body)", r"read_body"),
    (
        "the view itself (receiver.py: Delivery, json_response, orjson.dumps)",
        r"webhook/receiver\.py",
    ),
    ("Flask/Werkzeug request + response", r"flask/|werkzeug/"),
    ("gunicorn gthread worker: HTTP parsing, socket I/O, keep-alive", r"gunicorn/"),
]
WORKER_OWNERS = [
    ("SQLite action: open_downstream (connect, PRAGMAs, schema) per call", r"open_downstream"),
    ("SQLite action: insert + commit (fsync)", r"SqliteAction|workers/actions\.py"),
    (
        "our Redis calls: start / HMGET / mark_calling / finish (incl. redis-py)",
        r"workers/attempts\.py",
    ),
    ("job body (workers/jobs.py)", r"workers/jobs\.py"),
]
WORKER_RULES = [
    ("redis-py under RQ's own bookkeeping", r"redis/"),
    ("RQ worker: dequeue, job status, registries, results, heartbeats", r"rq/"),
    ("logging", r"logging/"),
]


def parse_collapsed(paths: list[Path]) -> list[tuple[list[str], int]]:
    stacks = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            frames, _, count = line.rpartition(" ")
            if frames and count.isdigit():
                stacks.append((frames.split(";"), int(count)))
    return stacks


def _site(frame: str) -> str:
    """``func (path/to/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py:12)``."""
    m = re.match(r"(.*) \((.*)\)$", frame)
    if not m:
        return frame
    name, where = m.groups()
    where = re.sub(r".*site-packages/", "", where)
    where = re.sub(r".*/(webhook|workers|bench)/", r"\1/", where)
    where = re.sub(r".*/lib/python3\.\d+/", "", where)
    return f"{name} ({where})"


def buckets(
    stacks: list[tuple[list[str], int]],
    rules: list[tuple[str, str]],
    owner_rules: list[tuple[str, str]] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    """Bucket each sample: by the innermost frame matching ``owner_rules`` if any (so
    redis-py time spent for our own code is charged to it), else by the innermost
    frame matching ``rules``."""
    owners = [(name, re.compile(rx)) for name, rx in owner_rules]
    compiled = [(name, re.compile(rx)) for name, rx in rules]
    total = sum(c for _, c in stacks) or 1
    by_bucket: Counter[str] = Counter()
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, count in stacks:
        sites = [_site(f) for f in frames]
        self_time[sites[-1]] += count
        for s in {re.sub(r":\d+\)$", ")", s) for s in sites}:
            if re.search(r"\((webhook|workers)/", s):
                inclusive[s] += count
        bucket = "other (interpreter, threads, imports)"
        for table in (owners, compiled):
            hit = None
            for site in reversed(sites):
                hit = next((name for name, rx in table if rx.search(site)), None)
                if hit:
                    break
            if hit:
                bucket = hit
                break
        by_bucket[bucket] += count
    return {
        "samples": total,
        "buckets": {k: round(v / total * 100, 1) for k, v in by_bucket.most_common()},
        "top_self": [[k, round(v / total * 100, 1)] for k, v in self_time.most_common(15)],
        "inclusive_project": [[k, round(v / total * 100, 1)] for k, v in inclusive.most_common(15)],
    }


def pyspy(pid: int, seconds: float, out: Path) -> subprocess.Popen:
    exe = shutil.which("py-spy") or str(BIN / "py-spy")
    # --gil: only the thread holding the GIL is sampled, so threads that are runnable
    # but waiting (for the GIL or, on a busy 2-core machine, for a CPU) are not counted
    # as work; C code that releases the GIL (socket I/O, zlib, large hashes) is then
    # under-counted, which the step timings (steps()) cover.
    argv = [exe, "record", "-p", str(pid), "-d", f"{seconds:g}", "-r", "200", "--nonblocking"]
    argv += ["--gil"]
    argv += ["-f", "raw", "-o", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def have_pyspy() -> bool:
    return shutil.which("py-spy") is not None or (BIN / "py-spy").exists()


def receiver(wd: Workdir, seconds: float) -> dict[str, Any]:
    factory = EventFactory(seed=11)
    pool = Pool(wd.path / "pool.bin", factory.events(14000), SECRET)
    with Stack() as st:
        redis = st.start(RedisServer(wd.sub("redis")))
        env = service_env(redis.url, wd.path)
        web = st.start(Gunicorn(env, logfile=wd.path / "web.log"))
        load.peak(web.port, web.pids, None, pool.fresh(), 1.0)
        redis.client().flushdb()
        outs = [wd.path / f"receiver-{pid}.txt" for pid in web.worker_pids()]
        spies = [pyspy(pid, seconds, out) for pid, out in zip(web.worker_pids(), outs, strict=True)]
        time.sleep(0.5)
        run = load.peak(web.port, web.pids, redis.proc.pid, pool.fresh(), seconds - 1)
        for spy in spies:
            spy.wait(60)
    stacks = parse_collapsed(outs)
    result = buckets(stacks, RECEIVER_RULES)
    result["run"] = {
        k: run[k]
        for k in ("rps", "p50_ms", "p99_ms", "server_cpu_us_per_req", "redis_cpu_us_per_req")
    }
    per = run["server_cpu_us_per_req"]
    result["us_per_request"] = {k: round(v / 100 * per) for k, v in result["buckets"].items()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "profile-receiver.collapsed", "w") as f:
        for path in outs:
            if path.exists():
                f.write(path.read_text())
    return result


def worker(wd: Workdir, jobs: int) -> dict[str, Any]:
    factory = EventFactory(seed=12)
    with Stack() as st:
        redis = st.start(RedisServer(wd.sub("redis-worker")))
        env = service_env(redis.url, wd.path)
        record = recorder(env)
        for payment in factory.payments(jobs):
            for body in payment.bodies:
                record(body)
        client = redis.client()
        client.rename("rq:queue:fulfilment", "bench:held")
        for body in factory.payment().bodies:  # one warm-up job: the worker's imports
            record(body)
        proc = st.popen(rq_worker(env, burst=False))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if int(client.hget("wl:payments:by_state", "fulfilled") or 0) >= 1:
                break
            time.sleep(0.05)
        jobs += 1
        out = wd.path / "worker.txt"
        spy = pyspy(proc.pid, 60, out)
        time.sleep(0.5)
        cpu0 = cpu_seconds([proc.pid])
        client.rename("bench:held", "rq:queue:fulfilment")
        started = time.perf_counter()
        # Done when the ledger says so (RQ's finished registry was seen to lose entries).
        while time.perf_counter() - started < 120:
            if int(client.hget("wl:payments:by_state", "fulfilled") or 0) >= jobs:
                break
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds([proc.pid]) - cpu0
        spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            stop(spy)
        client.close()
    stacks = parse_collapsed([out])
    result = buckets(stacks, WORKER_RULES, WORKER_OWNERS)
    per = cpu / jobs * 1e6
    result["run"] = {
        "jobs": jobs,
        "seconds": elapsed,
        "rate": jobs / elapsed,
        "cpu_us_per_job": per,
    }
    result["us_per_job"] = {k: round(v / 100 * per) for k, v in result["buckets"].items()}
    if out.exists():
        shutil.copy(out, RESULTS / "profile-worker.collapsed")
    return result


def steps(wd: Workdir, n: int) -> dict[str, Any]:
    """Median wall time of each step of the receiver's path, in this process, one call at a
    time over realistic events (Redis with the shipped config for the ledger write)."""
    import hashlib
    import statistics

    import orjson
    import stripe

    from bench.events import sign_all
    from bench.recording import delivery, ledger_for
    from webhook import create_app
    from webhook.events import check_shape, classify
    from webhook.ledger import compress_payload
    from webhook.verify import verify

    factory = EventFactory(seed=13)
    bodies = factory.events(n)
    sigs = sign_all(bodies, SECRET)
    out: dict[str, Any] = {}

    def timed(name: str, fn, items) -> None:  # noqa: ANN001
        times = []
        for item in items:
            t = time.perf_counter()
            fn(item)
            times.append((time.perf_counter() - t) * 1e6)
        out[name] = round(statistics.median(times), 1)

    pairs = list(zip(bodies, sigs, strict=True))
    with Stack() as st:
        redis = st.start(RedisServer(wd.sub("redis-steps")))
        env = service_env(redis.url, wd.path)
        ledger = ledger_for(env)
        settings = ledger.settings
        out |= round_trip_cpu(ledger.redis)
        events = [orjson.loads(b) for b in bodies]
        timed(
            "decode UTF-8 + verify signature (webhook.verify)",
            lambda p: verify(p[0].decode(), p[1], [SECRET], 300),
            pairs,
        )
        timed("orjson.loads + check_shape", lambda b: check_shape(orjson.loads(b)), bodies)
        timed("classify", lambda e: classify(e, settings.PAID_EVENT_TYPES), events)
        timed("sha256 of the body", lambda b: hashlib.sha256(b).hexdigest(), bodies)
        timed("compress_payload (zlib level 6)", compress_payload, bodies)
        paid = [classify(e, settings.PAID_EVENT_TYPES) for e in events]
        pks = [c.payment_key for c in paid if c.paid and c.payment_key]
        timed("enqueue_commands (RQ job built; paid events only)", ledger.enqueue_commands, pks)
        out["share of events that are paid"] = round(len(pks) / len(events), 2)
        ds = [delivery(ledger, b) for b in bodies]
        timed(
            "Ledger.record_delivery, whole (args + EVALSHA, appendfsync always)",
            ledger.record_delivery,
            ds,
        )
        ledger.redis.flushdb()
        calls = [_script_call(ledger, delivery(ledger, b)) for b in bodies]
        timed(
            "  of which the EVALSHA round trip alone",
            lambda ka: ledger._record(keys=ka[0], args=ka[1]),
            calls,
        )
        timed(
            "stripe.Webhook.construct_event (the quick-start's parse, for comparison)",
            lambda p: stripe.Webhook.construct_event(p[0], p[1], SECRET),
            pairs,
        )
        ledger.redis.flushdb()
        app = create_app({"REDIS_URL": redis.url, "STRIPE_WEBHOOK_SECRET": SECRET})
        devnull = open(os.devnull, "w")  # noqa: SIM115  (the delivery log lines still get formatted)
        for handler in logging.getLogger("webhook").handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(devnull)
        client = app.test_client()
        headers = {"Content-Type": "application/json", "User-Agent": "Stripe/1.0"}
        timed(
            "whole view through Flask's test client (no gunicorn)",
            lambda p: client.post(
                "/webhooks/stripe", data=p[0], headers={**headers, "Stripe-Signature": p[1]}
            ),
            pairs,
        )
    return out


def round_trip_cpu(client, n: int = 5000) -> dict[str, float]:  # noqa: ANN001
    """CPU of one bare Redis round trip, this process (user + sys) and Redis's own: what any
    receiver that writes to Redis pays before doing anything else."""

    def redis_cpu() -> float:
        info = client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    body = b"x" * 1200
    out = {}
    for name, call in (
        ("PING", client.ping),
        ("SET of 1.2 KB (appendfsync always)", lambda: client.set("bench:rtt", body)),
    ):
        cpu, server = time.process_time(), redis_cpu()
        for _ in range(n):
            call()
        out[f"one Redis round trip, {name}: client CPU"] = round(
            (time.process_time() - cpu) / n * 1e6, 1
        )
        out[f"one Redis round trip, {name}: Redis CPU"] = round((redis_cpu() - server) / n * 1e6, 1)
    client.delete("bench:rtt")
    return out


def _script_call(ledger, d) -> tuple[Any, Any]:  # noqa: ANN001
    """The keys and arguments record_delivery would send for ``d`` (nothing is sent)."""
    script = ledger._record
    captured: dict[str, Any] = {}

    def capture(keys, args):  # noqa: ANN001, ANN202
        captured["k"], captured["a"] = keys, args
        return [1, 0, 0, 0, "pending"]

    ledger._record = capture
    try:
        ledger.record_delivery(d)
    finally:
        ledger._record = script
    return captured["k"], captured["a"]


def run(quick: bool = False) -> dict[str, Any]:
    wd = Workdir.make("profile")
    result: dict[str, Any] = {"section": "profile", "quick": quick}
    try:
        log("profile: step timings of the receiver path, in-process")
        result["steps_us"] = steps(wd, 300 if quick else 1000)
        if not have_pyspy():
            result["skipped"] = "py-spy is not installed (.venv/bin/pip install py-spy)"
            return result
        log("profile: receiver under wrk, py-spy on both gunicorn workers")
        result["receiver"] = receiver(wd, 4.0 if quick else 7.0)
        log("profile: one SimpleWorker draining fulfilment jobs")
        result["worker"] = worker(wd, 150 if quick else 400)
    finally:
        wd.remove()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="py-spy profiles of the hot paths")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS / "profile.json")
    args = p.parse_args(argv)
    write_json(args.out, run(args.quick))
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
