"""Evidence bundles: ``export`` writes the ledger (and the built-in downstream's record) as
JSON files with a MANIFEST.sha256; ``verify`` re-checks them without touching Redis.

events.json and payments.json hold the very objects the ops API answers for one event
(with its payload) and one payment (with its timeline and the downstream's record)."""

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from redis import Redis

from ledger import keys, limits
from ledger.downstream import read_tables
from ledger.read import events as read_events
from ledger.read import payments as read_payments
from ledger.read.base import to_builtins
from ledger.reversals import is_refulfil_key
from ledger.stored import text
from ledgerctl.bundle_files import MANIFEST, BundleFileError, parse_manifest, present, read_bounded
from ledgerctl.bundle_reversals import check_reversals
from ledgerctl.verification import Verification

REQUIRED = ("counters.json", "events.json", "payments.json", "rejections.json")
OPTIONAL = (
    "downstream_calls.json",
    "downstream_orders.json",
    "downstream_reversals.json",
    "downstream_reversal_calls.json",
)
"""The files whose relations verify checks: the first always exported, the others with the
built-in SQLite downstream (its reversals: REVERSAL_ACTION, ledgerctl/bundle_reversals.py)."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha(path: Path) -> str:
    return _digest(path.read_bytes())


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
        event_id = text(key).removeprefix(keys.event(""))
        record = read_events.event(redis, event_id, with_payload=True)
        if record is not None:
            records.append(record)
    return [to_builtins(r) for r in sorted(records, key=lambda r: r.id)]


def _payments(redis: Redis, downstream: str | None) -> list[dict[str, Any]]:
    keys_seen = [
        text(k)
        for state in read_payments.PAYMENT_STATES
        for k in redis.zrange(keys.state_index(state), 0, -1)
    ]
    records = [read_payments.payment(redis, pk, downstream) for pk in keys_seen]
    found = sorted((r for r in records if r is not None), key=lambda r: r.payment_key)
    return [to_builtins(r) for r in found]


def export(redis: Redis, directory: Path, downstream: str | None) -> dict[str, int]:
    """Write the bundle (with the SQLite downstream's tables when ``downstream`` names its
    file); returns how many records of each kind it holds."""
    directory.mkdir(parents=True, exist_ok=True)
    stats = {text(k): int(v) for k, v in redis.hgetall(keys.STATS).items()}
    states = {text(k): int(v) for k, v in redis.hgetall(keys.PAYMENT_STATE_COUNTS).items()}
    has_downstream = bool(downstream and Path(downstream).exists())
    rejections = [json.loads(r) for r in redis.lrange(keys.REJECTIONS, 0, -1)]
    files = {
        "counters.json": {"stats": stats, "payments_by_state": states},
        "events.json": _events(redis),
        "payments.json": _payments(redis, downstream if has_downstream else None),
        "rejections.json": rejections,
    }
    if downstream and has_downstream:
        down = read_tables(downstream)
        for table in ("calls", "orders", "reversals", "reversal_calls"):
            files[f"downstream_{table}.json"] = down[table]
    written = [_write(directory, name, data) for name, data in files.items()]
    (directory / MANIFEST).write_text("".join(f"{_sha(p)}  {p.name}\n" for p in written))
    return {name: len(data) for name, data in files.items() if isinstance(data, list)}


def verify(directory: Path, max_bytes: int = limits.BUNDLE_MAX_FILE_BYTES) -> Verification:
    """Check that the manifest lists every file of the bundle with its hash, then every
    cross-file relation on every file present, listed or not."""
    v = Verification()
    data = _parse(v, _read_files(v, directory, max_bytes))
    events = _index(v, data, "events.json", "id")
    payments = _index(v, data, "payments.json", "payment_key")
    _check_events(v, data)
    _check_payments(v, data, events)
    _check_downstream(v, data, payments, events)
    check_reversals(v, data)
    _check_rejections(v, data)
    return v


def _index(v: Verification, data: dict[str, Any], name: str, key: str) -> dict[str, Any]:
    """A file's records by ``key`` (empty when the file is absent or not as export writes it)."""
    with v.records(name):
        return {r[key]: r for r in data.get(name) or []}
    return {}


def _read_files(v: Verification, directory: Path, max_bytes: int) -> dict[str, bytes]:
    """Every file listed or present that may be read, its hash checked against the manifest."""
    listed, names = _listing(v, directory, max_bytes)
    contents = {}
    for name in names:
        v.expect(name in listed, f"{name}: in the bundle but not listed in {MANIFEST}")
        try:
            data = read_bounded(directory, name, max_bytes)
        except BundleFileError as exc:
            v.expect(False, str(exc))
            continue
        if name in listed:
            v.expect(_digest(data) == listed[name], f"{name}: hash does not match the manifest")
        contents[name] = data
    return contents


def _listing(v: Verification, directory: Path, max_bytes: int) -> tuple[dict[str, str], list[str]]:
    """The manifest's names and hashes, and every name to check: listed or present."""
    listed: dict[str, str] = {}
    try:
        listed, problems = parse_manifest(read_bounded(directory, MANIFEST, max_bytes).decode())
        v.failures.extend(problems)
    except BundleFileError as exc:
        v.expect(False, str(exc))
    except UnicodeDecodeError:
        v.expect(False, f"{MANIFEST}: not UTF-8 text")
    try:
        names = present(directory)
    except OSError as exc:
        v.expect(False, f"the bundle directory cannot be listed ({exc.strerror})")
        names = []
    return listed, sorted(set(listed) | set(names))


def _parse(v: Verification, contents: dict[str, bytes]) -> dict[str, Any]:
    """The JSON of every file a relation check reads; the ones export always writes must be
    there."""
    parsed = {}
    for name in (*REQUIRED, *OPTIONAL):
        if name not in contents:
            v.expect(name in OPTIONAL, f"{name}: missing (an export always writes it)")
            continue
        try:
            data = json.loads(contents[name])
        except (ValueError, RecursionError) as exc:
            v.expect(False, f"{name}: not JSON ({type(exc).__name__}: {exc})")
            continue
        kind, term = (dict, "object") if name == "counters.json" else (list, "array of records")
        if v.expect(isinstance(data, kind), f"{name}: not a JSON {term}"):
            parsed[name] = data
    return parsed


def _check_events(v: Verification, data: dict[str, Any]) -> None:
    """Payloads match their hashes; per-event deliveries, distinct events and events found
    through the Events API match the counters."""
    events, counters = data.get("events.json"), data.get("counters.json")
    if events is None:
        return
    with v.records("events.json"):
        for e in events:
            actual = hashlib.sha256(e["payload"].encode()).hexdigest()
            v.expect(
                actual == e["payload_sha256"],
                f"event {e['id']}: payload does not match its SHA-256",
            )
    if counters is None:
        return
    with v.records("events.json and counters.json"):
        stats = counters["stats"]
        v.expect(
            sum(int(e["deliveries"]) for e in events) == stats.get("deliveries", 0),
            "per-event deliveries do not sum to the counter",
        )
        v.expect(len(events) == stats.get("events", 0), "distinct events do not match the counter")
        v.expect(
            sum(1 for e in events if e.get("origin") == "api") == stats.get("reconciled", 0),
            "events recorded from Stripe's Events API do not match the counter",
        )


def _check_payments(v: Verification, data: dict[str, Any], events: dict[str, Any]) -> None:
    """Payment states match the counters; a payment's events are its own."""
    payments, counters = data.get("payments.json"), data.get("counters.json")
    if payments is None:
        return
    if counters is not None:
        with v.records("payments.json"):
            states = Counter(p["state"] for p in payments)
            for state, count in counters["payments_by_state"].items():
                v.expect(
                    states.get(state, 0) == count,
                    f"payments in state {state}: counter {count}, records {states.get(state, 0)}",
                )
    with v.records("payments.json"):
        for p in payments:
            # Events older than EVENT_RETENTION_DAYS may have expired; those present must match.
            for event_id in (e["id"] for e in p["events"] if e["id"] in events):
                v.expect(
                    events[event_id]["payment_key"] == p["payment_key"],
                    f"payment {p['payment_key']}: event {event_id} is not its own",
                )


def _check_downstream(
    v: Verification, data: dict[str, Any], payments: dict[str, Any], events: dict[str, Any]
) -> None:
    """One effect per payment, each for a paid payment; one applied call per effect. An order
    under a fulfilment again's key (``refulfil:``, after a dispute won) is the payment's
    re-grant, not a second effect: at most one, on top of its effect (its reversal is
    checked in ledgerctl/bundle_reversals.py)."""
    orders, calls = data.get("downstream_orders.json"), data.get("downstream_calls.json")
    per_payment: Counter[str] = Counter()
    regrants: Counter[str] = Counter()
    with v.records("downstream_orders.json"):
        for o in orders or []:
            regrant = is_refulfil_key(o.get("idempotency_key") or "")
            (regrants if regrant else per_payment)[o["payment_key"]] += 1
        for pk, count in regrants.items():
            v.expect(
                count == 1 and per_payment[pk] == 1,
                f"payment {pk} has {count} re-grant(s) and {per_payment[pk]} effect(s)",
            )
        for pk, count in per_payment.items():
            v.expect(count == 1, f"payment {pk} has {count} effects")
            paid_by = payments.get(pk, {}).get("paid_by")
            v.expect(pk in payments, f"effect for unknown payment {pk}")
            v.expect(
                events.get(paid_by or "", {}).get("pays") is True,
                f"effect for {pk} without its paid event",
            )
    if calls is None:
        return
    with v.records("downstream_calls.json"):
        first: Counter[str] = Counter()
        again: Counter[str] = Counter()
        for c in calls:
            if c["outcome"] == "applied":
                (again if is_refulfil_key(c.get("idempotency_key") or "") else first)[
                    c["payment_key"]
                ] += 1
        for pk in sorted(set(first) | set(per_payment)):
            v.expect(
                first[pk] == per_payment[pk],
                f"payment {pk}: {first[pk]} applied calls, {per_payment[pk]} effects",
            )
        for pk in sorted(set(again) | set(regrants)):
            v.expect(
                again[pk] == regrants[pk],
                f"payment {pk}: {again[pk]} applied calls of its fulfilment again, "
                f"{regrants[pk]} re-grant(s)",
            )


def _check_rejections(v: Verification, data: dict[str, Any]) -> None:
    """No more rejections kept for a reason than were counted for it (the list is capped)."""
    rejections, counters = data.get("rejections.json"), data.get("counters.json")
    if rejections is None or counters is None:
        return
    with v.records("rejections.json"):
        kept = Counter(r["reason"] for r in rejections)
        for reason, count in kept.items():
            counted = int(counters["stats"].get(f"rejected:{reason}", 0))
            v.expect(count <= counted, f"{count} rejections kept for {reason}, {counted} counted")
