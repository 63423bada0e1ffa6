"""Evidence bundles: ``export`` writes the ledger (and the built-in downstream's record) as
JSON files with a MANIFEST.sha256; ``verify`` re-checks them without touching Redis."""

import hashlib
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from redis import Redis

from webhook import keys, readout

MANIFEST = "MANIFEST.sha256"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write(directory: Path, name: str, data: Any) -> Path:
    path = directory / name
    path.write_text(json.dumps(data, indent=1, sort_keys=True))
    return path


def add_to_manifest(path: Path) -> bool:
    """Add a file to the manifest of the bundle it sits in, if it sits in one."""
    manifest = path.parent / MANIFEST
    if not manifest.exists():
        return False
    lines = [ln for ln in manifest.read_text().splitlines() if not ln.endswith(f"  {path.name}")]
    manifest.write_text("\n".join([*lines, f"{_sha(path)}  {path.name}"]) + "\n")
    return True


def _events(redis: Redis) -> list[dict[str, Any]]:
    records = []
    for key in redis.scan_iter(match=keys.event("*"), count=1000):
        event_id = readout.text(key).removeprefix(keys.event(""))
        record = readout.event(redis, event_id, with_payload=True)
        if record is not None:
            records.append(record)
    return sorted(records, key=lambda r: r["id"])


def _payments(redis: Redis) -> list[dict[str, Any]]:
    keys_seen = [
        readout.text(k)
        for state in readout.PAYMENT_STATES
        for k in redis.zrange(keys.state_index(state), 0, -1)
    ]
    records = [readout.payment(redis, pk) for pk in keys_seen]
    return sorted((r for r in records if r is not None), key=lambda r: r["key"])


def _downstream(path: str) -> dict[str, list[dict[str, Any]]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        return {
            "calls": [dict(r) for r in db.execute("SELECT * FROM calls ORDER BY id")],
            "orders": [dict(r) for r in db.execute("SELECT * FROM orders ORDER BY payment_key")],
        }
    finally:
        db.close()


def export(redis: Redis, directory: Path, action: str) -> dict[str, int]:
    """Write the bundle; returns how many records of each kind it holds."""
    directory.mkdir(parents=True, exist_ok=True)
    stats = {readout.text(k): int(v) for k, v in redis.hgetall(keys.STATS).items()}
    states = {readout.text(k): int(v) for k, v in redis.hgetall(keys.PAYMENT_STATES).items()}
    rejections = [json.loads(r) for r in redis.lrange(keys.REJECTIONS, 0, -1)]
    files = {
        "counters.json": {"stats": stats, "payments_by_state": states},
        "events.json": _events(redis),
        "payments.json": _payments(redis),
        "rejections.json": rejections,
    }
    path = action.removeprefix("sqlite:///")
    if action.startswith("sqlite:///") and Path(path).exists():
        down = _downstream(path)
        files["downstream_calls.json"] = down["calls"]
        files["downstream_orders.json"] = down["orders"]
    written = [_write(directory, name, data) for name, data in files.items()]
    (directory / MANIFEST).write_text("".join(f"{_sha(p)}  {p.name}\n" for p in written))
    return {name: len(data) for name, data in files.items() if isinstance(data, list)}


class Verification:
    def __init__(self) -> None:
        self.passed = 0
        self.failures: list[str] = []

    def expect(self, condition: bool, message: str) -> None:
        if condition:
            self.passed += 1
        else:
            self.failures.append(message)


def verify(directory: Path) -> Verification:
    """Check every hash and the cross-file relations of a bundle."""
    v = Verification()
    listed: dict[str, str] = {}
    for line in (directory / MANIFEST).read_text().splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    for name, digest in listed.items():
        path = directory / name
        v.expect(
            path.exists() and _sha(path) == digest, f"{name}: hash does not match the manifest"
        )
    if v.failures:
        return v
    load = lambda name: json.loads((directory / name).read_text())  # noqa: E731
    counters, events, payments = load("counters.json"), load("events.json"), load("payments.json")
    stats = counters["stats"]
    by_id = {e["id"]: e for e in events}
    for e in events:
        actual = hashlib.sha256(e["payload"].encode()).hexdigest()
        v.expect(actual == e["sha"], f"event {e['id']}: payload does not match its SHA-256")
    v.expect(
        sum(int(e["n"]) for e in events) == stats.get("deliveries", 0),
        "per-event deliveries do not sum to the counter",
    )
    v.expect(len(events) == stats.get("events", 0), "distinct events do not match the counter")
    states = Counter(p["state"] for p in payments)
    for state, count in counters["payments_by_state"].items():
        v.expect(
            states.get(state, 0) == count,
            f"payments in state {state}: counter {count}, records {states.get(state, 0)}",
        )
    for p in payments:
        # Events older than EVENT_RETENTION_DAYS may have expired; those present must match.
        for event_id in (e for e in p["events"] if e in by_id):
            v.expect(
                by_id[event_id]["pk"] == p["key"],
                f"payment {p['key']}: event {event_id} is not its own",
            )
    if "downstream_orders.json" in listed:
        _verify_downstream(
            v, load("downstream_orders.json"), {p["key"]: p for p in payments}, by_id
        )
    return v


def _verify_downstream(
    v: Verification, orders: list[dict[str, Any]], payments: dict[str, Any], events: dict[str, Any]
) -> None:
    per_payment = Counter(o["payment_key"] for o in orders)
    for pk, count in per_payment.items():
        v.expect(count == 1, f"payment {pk} has {count} effects")
        paid_by = payments.get(pk, {}).get("paid_by")
        v.expect(pk in payments, f"effect for unknown payment {pk}")
        v.expect(
            events.get(paid_by or "", {}).get("paid") == "1",
            f"effect for {pk} without its paid event",
        )
