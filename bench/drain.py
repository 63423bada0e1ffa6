"""Section 3's drain, its parts: the variants' names, the harness's release of the held
queue, when a drain is done and when its jobs ended, and the ratios between variants."""

from datetime import UTC, datetime
from typing import Any

from bench.stats import column, ratio_runs
from ledger import keys

QUEUE = "fulfilment"
FORK = "rq.worker.Worker"
BATCH = "workers.dispatch.BatchWorker"
SLOTS = 16
"""FULFILMENT_CONCURRENCY of the BatchWorker variants (fulfilment-worker's class)."""
BATCHES = f"2xBatchWorker({SLOTS})"
SLOW_MS = 100
"""The HTTP downstream's answer time in the slow variants: a merchant's own app."""
SLOW_TODAY = f"ours, {SLOW_MS} ms HTTP downstream, 2xSimpleWorker"
SLOW_BATCH = f"ours, {SLOW_MS} ms HTTP downstream, {BATCHES}"
NOOP_ACTION = "bench.trivial:noop_action"
HELD = "bench:held"
RELEASE = """
local ids = redis.call('LRANGE', KEYS[1], 0, -1)
for i = 1, #ids, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ids, i, math.min(i + 999, #ids)))
end
redis.call('DEL', KEYS[1])
return #ids
"""


def _rq_time(raw: bytes | None) -> float | None:
    if not raw:
        return None
    stamp = datetime.strptime(raw.decode(), "%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.replace(tzinfo=UTC).timestamp()


POLL_CALLS = {"ours": 1, "trivial": 2}
"""Commands of one poll for the drain's end (``done``)."""
SETTLED = ("fulfilled", "failed", "interrupted", "retrying")


def done(client: Any, kind: str) -> int:
    """Jobs done: for ours, payments that left the queue for good (or for a retry, which
    no sweeper runs here: counted, and reported), by the ledger's own counts (RQ's
    registries are not written by every worker); for RQ's no-op jobs, RQ's registries."""
    if kind == "ours":
        return sum(int(c or 0) for c in client.hmget(keys.PAYMENT_STATE_COUNTS, SETTLED))
    return client.zcard(f"rq:finished:{QUEUE}") + client.zcard(f"rq:failed:{QUEUE}")


def end_times(
    client: Any, kind: str, job_ids: list[str], pay_keys: list[str], released: float
) -> tuple[list[float], list[float], dict[str, int]]:
    """Start and end times (s) of the drain's jobs, and their RQ statuses: for ours the
    ledger's ``fulfilled_at`` (Redis's clock, this machine's) from the release on."""
    statuses: dict[str, int] = {}
    with client.pipeline(transaction=False) as pipe:
        if kind == "ours":
            for k in pay_keys:
                pipe.hget(k, "fulfilled_at")
            ends = [int(ms) / 1000 for ms in pipe.execute() if ms]
            return [released], ends, statuses
        for job_id in job_ids:
            pipe.hmget(f"rq:job:{job_id}", ["started_at", "ended_at", "status"])
        rows = pipe.execute()
    starts = [t for t in (_rq_time(r[0]) for r in rows if r[0]) if t is not None]
    ends = [t for t in (_rq_time(r[1]) for r in rows if r[1]) if t is not None]
    for r in rows:
        key = (r[2] or b"?").decode()
        statuses[key] = statuses.get(key, 0) + 1
    return starts, ends, statuses


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


RATIOS = {  # name: (numerator variant, denominator variant)
    "ours/trivial SimpleWorker": ("ours 2xSimpleWorker", "trivial 2xSimpleWorker"),
    "ours PostgreSQL/ours SQLite SimpleWorker": (
        "ours, PostgreSQL action, 2xSimpleWorker",
        "ours 2xSimpleWorker",
    ),
    "ours no-op downstream/trivial SimpleWorker": (
        "ours, no-op downstream, 2xSimpleWorker",
        "trivial 2xSimpleWorker",
    ),
    "ours SimpleWorker/fork Worker": ("ours 2xSimpleWorker", "ours 2xWorker(fork)"),
    "ours/trivial fork Worker": ("ours 2xWorker(fork)", "trivial 2xWorker(fork)"),
    f"{SLOW_MS} ms downstream BatchWorker/SimpleWorker": (SLOW_BATCH, SLOW_TODAY),
    "BatchWorker/SimpleWorker": (f"ours {BATCHES}", "ours 2xSimpleWorker"),
    "no-op downstream BatchWorker/SimpleWorker": (
        f"ours, no-op downstream, {BATCHES}",
        "ours, no-op downstream, 2xSimpleWorker",
    ),
}
PER_JOB = ("redis_commands_per_job", "redis_round_trips_per_job")


def ratios(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each ratio of RATIOS whose two variants ran: jobs/s, and for BatchWorker against
    SimpleWorker the Redis commands and round trips per job too."""
    out: dict[str, Any] = {}
    for name, (a, b) in RATIOS.items():
        if a in runs and b in runs:
            out[name] = ratio_runs(column(runs[a], "rate"), column(runs[b], "rate"))
            if "BatchWorker/" in name:
                for m in PER_JOB:
                    out[name][m] = ratio_runs(column(runs[a], m), column(runs[b], m))
    return out
