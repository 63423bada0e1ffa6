"""py-spy sampling of the receiver and of a fulfilment worker, grouped into named buckets.

Receiver: the shipped stack (gunicorn gthread, 2 workers, Redis with the shipped config)
at peak load from wrk, both gunicorn workers sampled by py-spy (on-CPU samples only).
Worker: one ``rq worker -w rq.worker.SimpleWorker`` draining real fulfilment jobs.
Each sample is put in one bucket by the innermost frame that matches a rule below, so
the buckets add up to 100 % of the process's CPU samples; the share times the measured
CPU per request gives microseconds per request. Raw collapsed stacks are kept in var/bench/
for flame graphs.
"""

import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import load
from bench.common import (
    BIN,
    RESULTS,
    SECRET,
    Gunicorn,
    RedisServer,
    Stack,
    Workdir,
    payment_states,
    rq_worker,
    service_env,
    stop,
)
from bench.cpu import cpu_seconds
from bench.events import EventFactory, Pool
from bench.recording import recorder

Rules = Sequence[tuple[str, str]]
Stacks = list[tuple[list[str], int]]

# (bucket, regex on "function (file)"); the innermost matching frame decides.
RECEIVER_RULES = [
    (
        "signature check: webhook.verify (header parsing, HMAC-SHA256)",
        r"stripe/|webhook/verify\.py",
    ),
    (
        "RQ job offered with every paid delivery (Jobs.prepare: RQ's pattern filled in, zlib)",
        r"rq/|ledger/enqueue",
    ),
    ("payload compression (compress_payload)", r"compress_payload|ledger/payloads"),
    ("redis-py FCALL: pack, send, wait, parse", r"redis/"),
    (
        "ledger arguments (sha256, scalars, names) in record_delivery",
        r"record_delivery|delivery_call|_scalar|_amount|ledger/scripts\.py",
    ),
    ("JSON parse + UTF-8 decode (orjson) in parse_event", r"parse_event"),
    (
        "event shape, classify, source",
        r"check_shape|classify|rule_for|delivery_source|ledger/events\.py|ledger/event_shape\.py",
    ),
    ("logging: one JSON line per delivery", r"logging/|log\.info"),
    ("Prometheus metrics", r"prometheus_client|webhook/metrics\.py"),
    ("reading the body (read_body)", r"read_body"),
    (
        "the endpoint itself (endpoint.py: Delivery, the answer, orjson.dumps)",
        r"webhook/endpoint\.py|webhook/receiver\.py",
    ),
    ("Flask/Werkzeug request + response", r"flask/|werkzeug/"),
    (
        "gunicorn's gevent worker (webhook/server.py): HTTP parsing, socket I/O, greenlets",
        r"gunicorn/|gevent/|webhook/server\.py",
    ),
]
WORKER_OWNERS = [
    ("SQLite action: open_downstream (connect, PRAGMAs, schema) per call", r"open_downstream"),
    ("SQLite action: insert + commit (fsync)", r"SqliteAction|workers/actions\.py"),
    (
        "our Redis calls: start, finish (+ mark_calling if not replay-safe), incl. redis-py",
        r"ledger/attempts\.py|ledger/scripts\.py",
    ),
    ("job body (workers/jobs.py)", r"workers/jobs\.py"),
]
WORKER_RULES = [
    ("redis-py under RQ's own bookkeeping", r"redis/"),
    ("RQ worker: dequeue, job status, registries, results, heartbeats", r"rq/"),
    ("logging", r"logging/"),
]
OTHER = "other (interpreter, threads, imports)"


def have_pyspy() -> bool:
    return shutil.which("py-spy") is not None or (BIN / "py-spy").exists()


def pyspy(pid: int, seconds: float, out: Path) -> subprocess.Popen:
    """Start py-spy recording ``pid`` for ``seconds`` into ``out`` (raw collapsed stacks)."""
    exe = shutil.which("py-spy") or str(BIN / "py-spy")
    # --gil: only the thread holding the GIL is sampled, so threads that are runnable
    # but waiting (for the GIL or, on a busy 2-core machine, for a CPU) are not counted
    # as work; C code that releases the GIL (socket I/O, zlib, large hashes) is then
    # under-counted, which the step timings (profile.steps()) cover.
    argv = [exe, "record", "-p", str(pid), "-d", f"{seconds:g}", "-r", "200", "--nonblocking"]
    argv += ["--gil"]
    argv += ["-f", "raw", "-o", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_pyspy(spy: subprocess.Popen) -> None:
    """Stop py-spy early; it writes its output on SIGINT."""
    spy.send_signal(signal.SIGINT)
    try:
        spy.wait(30)
    except subprocess.TimeoutExpired:
        stop(spy)


def parse_collapsed(paths: list[Path]) -> Stacks:
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


def _innermost_match(sites: list[str], table: list[tuple[str, re.Pattern[str]]]) -> str | None:
    """Name of the first rule matching the innermost frame that matches any rule."""
    for site in reversed(sites):
        hit = next((name for name, rx in table if rx.search(site)), None)
        if hit:
            return hit
    return None


def _percent(counts: Counter[str], total: int, n: int | None = None) -> list[tuple[str, float]]:
    return [(k, round(v / total * 100, 1)) for k, v in counts.most_common(n)]


def buckets(stacks: Stacks, rules: Rules, owner_rules: Rules = ()) -> dict[str, Any]:
    """Bucket each sample: by the innermost frame matching ``owner_rules`` if any (so
    redis-py time spent for our own code is charged to it), else by the innermost
    frame matching ``rules``."""
    tables = [[(name, re.compile(rx)) for name, rx in t] for t in (owner_rules, rules)]
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
        hits = (_innermost_match(sites, table) for table in tables)
        by_bucket[next((h for h in hits if h), OTHER)] += count
    return {
        "samples": total,
        "buckets": dict(_percent(by_bucket, total)),
        "top_self": [list(p) for p in _percent(self_time, total, 15)],
        "inclusive_project": [list(p) for p in _percent(inclusive, total, 15)],
    }


def receiver(wd: Workdir, seconds: float) -> dict[str, Any]:
    """Both gunicorn workers sampled at peak load from wrk."""
    factory = EventFactory(seed=11)
    pool = Pool(wd.path / "pool.bin", factory.events(14000), SECRET)
    with Stack() as st:
        redis = st.start(RedisServer(wd.sub("redis")))
        env = service_env(redis.url, wd.path)
        web = st.start(Gunicorn(env, log=wd.path / "web.log"))
        load.warm_up(web, pool)
        redis.client().flushdb()
        pids = web.worker_pids()
        outs = [wd.path / f"receiver-{pid}.txt" for pid in pids]
        spies = [pyspy(pid, seconds, out) for pid, out in zip(pids, outs, strict=True)]
        time.sleep(0.5)
        run = load.peak(web.port, web.pids, redis.pid, pool.fresh(), seconds - 1)
        for spy in spies:
            spy.wait(60)
    result = buckets(parse_collapsed(outs), RECEIVER_RULES)
    keep = ("rps", "p50_ms", "p99_ms", "server_cpu_us_per_req", "redis_cpu_us_per_req")
    result["run"] = {k: run[k] for k in keep}
    per = run["server_cpu_us_per_req"]
    result["us_per_request"] = {k: round(v / 100 * per) for k, v in result["buckets"].items()}
    _keep_collapsed(outs, RESULTS / "profile-receiver.collapsed")
    return result


def _keep_collapsed(paths: list[Path], dest: Path) -> None:
    """Concatenate the raw stacks into ``dest`` (for flame graphs)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w") as f:
        for path in paths:
            if path.exists():
                f.write(path.read_text())


def _fulfilled(client: Any) -> int:
    return payment_states(client).get("fulfilled", 0)


def _wait_fulfilled(client: Any, n: int, timeout: float, poll: float) -> None:
    """Wait until the ledger counts ``n`` fulfilled payments, or ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _fulfilled(client) >= n:
            return
        time.sleep(poll)


def _hold_jobs(env: Mapping[str, str], client: Any, jobs: int) -> None:
    """Record ``jobs`` payments' deliveries with their jobs held off the queue, then one
    warm-up job left on it (the worker's imports)."""
    factory = EventFactory(seed=12)
    record = recorder(env)
    for payment in factory.payments(jobs):
        for body in payment.bodies:
            record(body)
    client.rename("rq:queue:fulfilment", "bench:held")
    for body in factory.payment().bodies:
        record(body)


def worker(wd: Workdir, jobs: int) -> dict[str, Any]:
    """One SimpleWorker sampled while it drains ``jobs`` held fulfilment jobs."""
    with Stack() as st:
        redis = st.start(RedisServer(wd.sub("redis-worker")))
        env = service_env(redis.url, wd.path)
        client = redis.client()
        _hold_jobs(env, client, jobs)
        proc = st.popen(rq_worker(env, burst=False))
        _wait_fulfilled(client, 1, 30, 0.05)
        jobs += 1
        out = wd.path / "worker.txt"
        spy = pyspy(proc.pid, 60, out)
        time.sleep(0.5)
        cpu0 = cpu_seconds([proc.pid])
        client.rename("bench:held", "rq:queue:fulfilment")
        started = time.perf_counter()
        # Done when the ledger says so (RQ's finished registry was seen to lose entries).
        _wait_fulfilled(client, jobs, 120, 0.02)
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds([proc.pid]) - cpu0
        stop_pyspy(spy)
        client.close()
    result = buckets(parse_collapsed([out]), WORKER_RULES, WORKER_OWNERS)
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
