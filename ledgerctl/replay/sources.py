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


def _from_text(text: str) -> Iterator[Item]:
    stripped = text.strip()
    if not stripped:
        return
    if stripped.startswith("["):
        for event in json.loads(stripped):
            yield event, samples.encode(event)
        return
    try:
        event = json.loads(stripped)
    except json.JSONDecodeError:
        for line in stripped.splitlines():
            if line.strip():
                yield json.loads(line), line.strip().encode()
        return
    yield event, text.encode()


def from_files(paths: list[Path]) -> Iterator[Item]:
    """A JSON event (bytes kept as they are), a JSON array, JSON Lines, or folders of them."""
    for path in paths:
        files = (
            sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl"))
            if path.is_dir()
            else [path]
        )
        for file in files:
            yield from _from_text(file.read_text())


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


def generated(
    count: int, rng: random.Random, checkout: bool = False, only: tuple[str, ...] = ()
) -> Iterator[Item]:
    """``count`` realistic card payments, each with the events Stripe sends for it; through
    Checkout, the session names the merchant's order (``client_reference_id`` and
    ``metadata``), as a shop's does, so the purchase each action gets can be checked."""
    for n in range(count):
        for event in samples.payment_events(rng, checkout=checkout):
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
