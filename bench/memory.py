"""Section 4: Redis memory per recorded event and per payment.

100,000 realistic events (whole payments, 3-4 events each, 2-6 KB as Stripe sends them)
are recorded through the real ``Ledger.record_delivery`` into a fresh Redis (2
processes x 4 threads). Then:

- bytes per event, all-in: ``INFO memory`` used_memory after - before, over the events
  (everything the recording created: event hashes, payment records, indexes, request
  answers (kept REQUEST_ID_TTL, 300 s), queued RQ jobs (the shipped RQ_RESULT_TTL 0 deletes
  a job once it has run), counters);
- ``MEMORY USAGE`` (exact, SAMPLES 0) of sampled keys of each kind, and the per-entry
  cost of the indexes;
- per payment: a sample of payments is fulfilled by the real job
  (``workers.jobs.fulfil_payment`` with the built-in SQLite action), then the payment
  hash (its attempts are fields of it) is measured;
- compression: the generated events come from the payloads the preset dictionary is made
  of, so real payloads it was not made from (``bench/heldout/``) are compressed too, and
  bytes per event are re-estimated with their ratio.

Redis runs with ``appendonly no`` here: the AOF changes disk, not memory.

    .venv/bin/python -m bench.memory [--quick]
"""

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from rq import Queue

from bench.common import (
    RedisServer,
    Stack,
    Workdir,
    log,
    payment_states,
    section_main,
    service_env,
)
from bench.stats import target
from ledger import keys
from ledger.limits import REQUEST_ID_TTL
from ledger.settings import Settings
from ledger.stored import text

SAMPLE = 500
HELD_OUT = Path(__file__).resolve().parent / "heldout"


def _record_share(args: tuple[dict[str, str], int, int]) -> tuple[int, int, float]:
    """In a child process: record ``n`` events (whole payments) with 4 threads."""
    from bench.events import EventFactory
    from bench.recording import recorder

    env, seed, n = args
    factory = EventFactory(seed=seed)
    bodies = factory.events(n)
    record = recorder(env)
    started = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        # Each payment's events in order on one thread, as Stripe would send them.
        list(pool.map(record, bodies, chunksize=64))
    return len(bodies), sum(map(len, bodies)), time.perf_counter() - started


SHIPPING_FIELDS = ("p_pi_ship", "p_cs_ship")
"""Where a payment keeps where to ship (ledger/purchase_shipping.py): the samples'
PaymentIntents all carry a shipping address, as Stripe's fixtures do; a shop selling nothing
to ship keeps neither. (The buyer's own phone and address, ``p_cs_phone`` and ``p_cs_addr``,
stay: the samples' sessions carry none, where Checkout often collects a country and postal
code.)"""


@dataclass
class Unshipped:
    mean: float
    """MEMORY USAGE of each sampled payment's hash copied without SHIPPING_FIELDS."""
    shipped: set[str]
    """The payments that kept any of them."""


def _sizes_without(client, pay_keys: list[str], fields: tuple[str, ...]) -> Unshipped:
    """Each payment's hash as it would be without ``fields``: copied (COPY keeps the
    encoding), the fields deleted, measured, the copy deleted."""
    sizes, shipped = [], set()
    for pk in pay_keys:
        copy = f"bench:unshipped:{pk}"
        client.copy(keys.payment(pk), copy, replace=True)
        if client.hdel(copy, *fields):
            shipped.add(pk)
        sizes.append(int(client.memory_usage(copy, samples=0) or 0))
        client.delete(copy)
    return Unshipped(sum(sizes) / len(sizes) if sizes else float("nan"), shipped)


def _usage(client, keys: list[str]) -> float:
    if not keys:
        return float("nan")
    with client.pipeline(transaction=False) as pipe:
        for k in keys:
            pipe.memory_usage(k, samples=0)
        sizes = [s for s in pipe.execute() if s is not None]
    return sum(sizes) / len(sizes) if sizes else float("nan")


def _scan(client, pattern: str, limit: int, exclude: str | None = None) -> list[str]:
    out = []
    for key in client.scan_iter(match=pattern, count=2000):
        k = key.decode()
        if exclude and exclude in k:
            continue
        out.append(k)
        if len(out) >= limit:
            break
    return out


def compression_held_out() -> dict[str, Any]:
    """Compressed / raw size: generated events vs real payloads not in the dictionary."""
    from bench.events import EventFactory
    from ledger.payloads import compress_payload

    def ratio(bodies: list[bytes]) -> float:
        return sum(len(compress_payload(b)) for b in bodies) / sum(map(len, bodies))

    files = sorted(HELD_OUT.glob("*.json"))
    per_file = {f.name: ratio([f.read_bytes()]) for f in files}
    return {
        "generated_ratio": ratio(EventFactory(seed=7).events(2000)),
        "held_out_ratio": max(per_file.values()),  # the worst one, to be safe
        "held_out_files": per_file,
    }


def run(quick: bool = False) -> dict[str, Any]:
    n_events = 20_000 if quick else 100_000
    wd = Workdir.make("memory")
    try:
        with Stack() as st:
            redis = st.start(RedisServer(wd.sub("redis"), appendonly="no", extra=["--save", ""]))
            env = service_env(redis.url, wd.path)
            client = redis.client()
            client.flushall()
            client.memory_purge()
            before = client.info("memory")
            log(f"memory: recording {n_events} events through Ledger.record_delivery")
            started = time.perf_counter()
            shares = [(env, 100 + i, n_events // 2) for i in range(2)]
            with get_context("spawn").Pool(2) as procs:
                done = procs.map(_record_share, shares)
            elapsed = time.perf_counter() - started
            events = sum(d[0] for d in done)
            raw_bytes = sum(d[1] for d in done)
            after = client.info("memory")
            stats = {text(k): text(v) for k, v in client.hgetall(keys.STATS).items()}
            states = payment_states(client)
            payments = sum(v for v in states.values() if v > 0)
            used = after["used_memory"] - before["used_memory"]
            dataset = after["used_memory_dataset"] - before["used_memory_dataset"]
            patterns = {
                f"event hash {keys.event('*')}": keys.event("*"),
                f"request answer {keys.request('*')} ({REQUEST_ID_TTL} s)": keys.request("*"),
                f"payment hash {keys.payment('*')} (queued)": keys.payment("*"),
                "RQ job rq:job:* (queued)": "rq:job:*",
            }
            kinds = {name: _usage(client, _scan(client, p, SAMPLE)) for name, p in patterns.items()}
            counts = {
                "keys": client.dbsize(),
                "events": int(stats.get("events", 0)),
                "deliveries": int(stats.get("deliveries", 0)),
                "payments": payments,
            }
            indexes = {}
            for key in (
                keys.EVENT_INDEX,
                keys.DUE,
                Queue(Settings.QUEUE_NAME, connection=client).key,
            ):
                size = client.memory_usage(key, samples=0) or 0
                kind = text(client.type(key))
                n = (
                    client.zcard(key)
                    if kind == "zset"
                    else client.llen(key)
                    if kind == "list"
                    else 0
                )
                indexes[key] = {"bytes": size, "entries": n, "per_entry": size / n if n else None}
            for key in client.scan_iter(match=keys.state_index("*"), count=1000):
                k = key.decode()
                n = client.zcard(k) if client.type(k) == b"zset" else 0
                size = client.memory_usage(k, samples=0) or 0
                indexes[k] = {"bytes": size, "entries": n, "per_entry": size / n if n else None}

            # Fulfil a sample of payments with the real job, then measure their records.
            log(f"memory: fulfilling {SAMPLE} payments with workers.jobs.fulfil_payment")
            pay_prefix = keys.payment("")
            pay_keys = [
                k.removeprefix(pay_prefix) for k in _scan(client, keys.payment("*"), SAMPLE * 3)
            ][:SAMPLE]
            verdicts: dict[str, int] = {}
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                from workers.jobs import fulfil_payment

                for pk in pay_keys:
                    v = str(fulfil_payment(pk).get("verdict"))
                    verdicts[v] = verdicts.get(v, 0) + 1
            finally:
                for k, old in saved.items():
                    if old is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = old
            with client.pipeline(transaction=False) as pipe:
                for pk in pay_keys:
                    pipe.memory_usage(keys.payment(pk), samples=0)
                pay_sizes = [int(x) for x in pipe.execute() if x is not None]
            pay_hash = sum(pay_sizes) / len(pay_sizes) if pay_sizes else float("nan")
            unshipped = _sizes_without(client, pay_keys, SHIPPING_FIELDS)
            fields = client.hlen(keys.payment(pay_keys[0])) if pay_keys else 0
            encoding = client.object("encoding", keys.payment(pay_keys[0])) if pay_keys else b""
            evt_key = _scan(client, keys.event("*"), 1)
            evt_encoding = client.object("encoding", evt_key[0]) if evt_key else b""
            client.close()
    finally:
        wd.remove()
    per_event = used / events
    raw_per_event = raw_bytes / events
    per_payment = pay_hash
    held_out = compression_held_out()
    held_out_per_event = (
        per_event + (held_out["held_out_ratio"] - held_out["generated_ratio"]) * raw_per_event
    )
    result = {
        "section": "memory",
        "quick": quick,
        "events": events,
        "record_seconds": elapsed,
        "record_rate": events / elapsed,
        "counts": counts,
        "raw_bytes_per_event": raw_per_event,
        "used_memory_delta": used,
        "used_memory_dataset_delta": dataset,
        "bytes_per_event_all_in": per_event,
        "dataset_bytes_per_event": dataset / events,
        "ratio_to_raw": per_event / raw_per_event,
        "memory_usage_by_kind": kinds,
        "indexes": indexes,
        "compression": held_out,
        "bytes_per_event_held_out_estimate": held_out_per_event,
        "fulfilled_sample": {
            "payments": len(pay_keys),
            "verdicts": verdicts,
            "payment_hash_bytes": pay_hash,
            "per_payment_bytes": per_payment,
            "payment_bytes_max": max(pay_sizes, default=0),
            "shipping_share": sum(1 for pk in pay_keys if pk in unshipped.shipped) / len(pay_keys)
            if pay_keys
            else 0.0,
            "per_payment_bytes_unshipped": unshipped.mean,
            "share_over_512": sum(1 for x in pay_sizes if x > 512) / max(1, len(pay_sizes)),
            "payment_hash_fields": fields,
            "payment_hash_encoding": encoding.decode() if isinstance(encoding, bytes) else encoding,
            "event_hash_encoding": evt_encoding.decode()
            if isinstance(evt_encoding, bytes)
            else evt_encoding,
        },
        "config": {"redis": "config/redis.conf with appendonly no", "sample": SAMPLE},
    }
    result["targets"] = [
        target(
            "4. Redis bytes per event / raw payload bytes", per_event / raw_per_event, 0.5, False
        ),
        target(
            "4. the same, payloads compressing like held-out real ones (estimate)",
            held_out_per_event / raw_per_event,
            0.5,
            False,
        ),
        target(  # issue 40: the purchase's fields within 1.5 x the ~505 B a record took before
            "4. bytes per fulfilled payment record (one hash, the purchase in), nothing shipped",
            unshipped.mean,
            757,
            False,
        ),
    ]
    return result


if __name__ == "__main__":
    sys.exit(section_main("memory", run, sys.argv[1:]))
