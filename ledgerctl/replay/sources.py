"""Where replayed events come from: files, the ledger, or the generator; and the refunds
and disputes of the payments sent (``--refunds``, ledgerctl/takebacks.py).

Each source yields ``(event, body)``: the parsed event and the exact bytes to send.
"""

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from redis import Redis

from ledger import keys
from ledger.payloads import decompress_payload
from ledger.read import payments
from ledger.stored import text
from ledgerctl import samples, takebacks

Item = tuple[dict[str, Any], bytes]


class BadSource(ValueError):
    """An event file the script cannot send: missing, unreadable, not JSON, or holding
    something that is not an event; its message names the file (and line or item)."""


def _from_text(text: str) -> Iterator[Item]:
    """One JSON event (its bytes as they are), a JSON array of events, or JSON Lines."""
    if not text.strip():
        return
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as error:
        yield from _json_lines(text, error)
        return
    if isinstance(whole, list):
        for event in whole:
            yield event, samples.encode(event)
        return
    yield whole, text.encode()


def _json_lines(text: str, whole_error: json.JSONDecodeError) -> Iterator[Item]:
    """One event per line. A first line that is no JSON either means the file was meant as
    one JSON document, so that document's error is the one named."""
    read_one = False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as error:
            where, why = (number, error.msg) if read_one else (whole_error.lineno, whole_error.msg)
            raise BadSource(f"line {where}: not JSON ({why})") from None
        read_one = True
        yield event, line.strip().encode()


def from_files(paths: list[Path]) -> Iterator[Item]:
    """A JSON event (bytes kept as they are), a JSON array, JSON Lines, or folders of them;
    BadSource for a path that is not there or a file that holds something else."""
    for path in paths:
        if not path.exists():
            raise BadSource(f"{path}: no such file or folder")
        files = (
            sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl"))
            if path.is_dir()
            else [path]
        )
        for file in files:
            yield from _events_of(file)


def _events_of(file: Path) -> list[Item]:
    try:
        content = file.read_bytes().decode()
    except UnicodeDecodeError as error:
        raise BadSource(f"{file}: not UTF-8 (byte {error.start})") from None
    except OSError as error:
        raise BadSource(f"{file}: cannot be read ({error.strerror})") from None
    try:
        items = list(_from_text(content))
    except BadSource as error:
        raise BadSource(f"{file}: {error}") from None
    for number, (event, _) in enumerate(items, 1):
        if not (isinstance(event, dict) and isinstance(event.get("id"), str)):
            raise BadSource(f"{file}: item {number} is not an event (a JSON object with an id)")
    return items


def from_ledger(
    redis: Redis,
    event_ids: list[str] | None = None,
    event_type: str | None = None,
    payment: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> Iterator[Item]:
    """Events stored in the ledger, re-sent with the same bytes as stored."""
    if event_ids:
        candidates = event_ids
    elif payment:
        record = payments.payment(redis, payment)
        candidates = [e.id for e in record.events] if record else []
    else:
        low = since_ms if since_ms is not None else "-inf"
        high = until_ms if until_ms is not None else "+inf"
        candidates = [text(i) for i in redis.zrangebyscore(keys.EVENT_INDEX, low, high)]
    for event_id in candidates:
        stored = redis.hget(keys.event(event_id), "body")
        if stored is None:
            continue
        body = decompress_payload(cast(bytes, stored))
        event = json.loads(body)
        if event_type and event.get("type") != event_type:
            continue
        yield event, body


SEEDED_CREATED = 1_767_225_600
"""2026-01-01 00:00 UTC: where a seeded run's ``created`` times start (its seed added)."""


def generated(
    count: int,
    rng: random.Random,
    checkout: bool = False,
    only: tuple[str, ...] = (),
    created: int | None = None,
) -> Iterator[Item]:
    """``count`` realistic card payments, each with the events Stripe sends for it; through
    Checkout, the session names the merchant's order (``client_reference_id`` and
    ``metadata``), as a shop's does, so the purchase each action gets can be checked.
    ``created``: the events' time (s), else now."""
    for n in range(count):
        for event in samples.payment_events(rng, checkout=checkout, created=created):
            if event["type"] == "checkout.session.completed":
                order = f"order_{n + 1:06d}"
                event["data"]["object"].update(client_reference_id=order, metadata={"order": order})
            if not only or event["type"] in only:
                yield event, samples.encode(event)


def refunds_and_disputes(
    items: list[Item], rng: random.Random, kinds: tuple[str, ...] = takebacks.KINDS
) -> list[dict[str, list[Item]]]:
    """For the n-th payment among ``items`` (by its ``charge.succeeded``), by its
    PaymentIntent, the refunds or dispute of ``takebacks.kind_of(n, kinds)``: full, partial,
    two partials, dispute lost or won, or none; then, in a second wave sent once the first is
    settled, what follows them (a dispute lost, then won: ``takebacks.later_for_payment``).
    The waves that have events."""
    charges = [event for event, _ in items if event.get("type") == "charge.succeeded"]
    first: dict[str, list[Item]] = {}
    then: dict[str, list[Item]] = {}
    for n, charge in enumerate(charges):
        kind = takebacks.kind_of(n, kinds)
        events = takebacks.for_payment(rng, [charge], kind)
        later = takebacks.later_for_payment(rng, events, kind)
        pi = str(charge["data"]["object"]["payment_intent"])
        for wave, sent in ((first, events), (then, later)):
            if sent:
                wave.setdefault(pi, []).extend((event, samples.encode(event)) for event in sent)
    return [wave for wave in (first, then) if wave]


def right_after(items: list[Item], later: dict[str, list[Item]]) -> list[Item]:
    """``items`` with each payment's ``later`` events right after its own last one."""
    out: list[Item] = []
    for n, item in enumerate(items):
        out.append(item)
        pi = _intent(item[0])
        if n + 1 == len(items) or _intent(items[n + 1][0]) != pi:
            out += later.pop(pi, [])
    return out + [item for rest in later.values() for item in rest]


def _intent(event: dict[str, Any]) -> str:
    obj = event.get("data", {}).get("object", {})
    found = obj.get("payment_intent") or (
        obj.get("id") if obj.get("object") == "payment_intent" else ""
    )
    return str(found or "")
