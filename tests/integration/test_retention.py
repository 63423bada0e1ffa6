"""Retention: a ledger run through purge keeps no key, member, field or value that names a
purged payment, one of its events or one of its aliases, except keys that expire on their
own within the time that passed; and the sets that traffic fills stay within their window.
Every key on the server is read (SCAN), whoever wrote it (the scripts, the jobs, RQ)."""

import random
from typing import Any

from redis import Redis

from ledger import keys, settings
from ledger.decisions import decide
from ledger.deliveries import Delivery, Ledger, new_request_id
from ledger.events import classify
from ledger.gate import Gate
from ledger.settings import Settings
from ledgerctl import samples
from tests.support.helpers import purchase, settled_as, state_of
from tests.support.inprocess import Fulfilment

CLOCK = "wl:test:clock"
"""The scripts' clock for the traffic that comes after the retention window (see
keys.lua_constants): Redis's own clock, and so every TTL, stays where it is."""

DAY_MS = 86_400_000
LATER_MS = 32 * DAY_MS
"""How long after the first traffic the later traffic comes and purge runs."""


def intent(rng: random.Random, customer: str | None, amount: int) -> dict[str, Any]:
    event = samples.event_of_type(rng, "payment_intent.succeeded")
    event["data"]["object"].update(
        id=samples.random_id(rng, "pi"), customer=customer, amount_received=amount
    )
    return event


def about(event: dict[str, Any], **fields: Any) -> dict[str, Any]:
    event["data"]["object"].update(fields)
    return event


def record(ledger: Ledger, s: Settings, event: dict[str, Any]) -> str:
    c = classify(event, s.policy)
    body = samples.encode(event)
    delivery = Delivery(event, body, c, "test", "stripe", new_request_id())
    return ledger.record_delivery(delivery).payment_key


def contents(redis: Redis, key: bytes) -> list[bytes]:
    """Everything a key holds, as bytes to search: its name, members, fields and values."""
    kind = redis.type(key)
    if kind == b"string":
        found = [redis.get(key) or b""]
    elif kind == b"hash":
        found = [b for pair in redis.hgetall(key).items() for b in pair]
    elif kind == b"zset":
        found = redis.zrange(key, 0, -1)
    elif kind == b"set":
        found = list(redis.smembers(key))
    elif kind == b"list":
        found = redis.lrange(key, 0, -1)
    else:  # a stream (RQ's results), which no job here writes
        found = [repr(redis.xrange(key)).encode()]
    return [key, *found]


def leftovers(redis: Redis, names: set[str], passed_ms: int) -> dict[str, list[str]]:
    """Keys that hold any of ``names``, each with the names it holds. A key that is one
    thing's own record (its name names it, or it is a string) may stay if it expires within
    ``passed_ms`` of when its TTL was set; a shared key (a set, a list, a hash of others)
    must not hold it at all, whatever its TTL: later traffic renews that."""
    found: dict[str, list[str]] = {}
    for key in redis.scan_iter(count=1000):
        named = sorted(n for n in names if n.encode() in b"\n".join(contents(redis, key)))
        own = redis.type(key) == b"string" or any(n.encode() in key for n in names)
        if named and not (own and 0 < redis.pttl(key) < passed_ms):
            found[key.decode()] = named
    return found


def test_purge_leaves_no_key_of_a_purged_payment(fulfilment, redis: Redis, rng) -> None:
    f: Fulfilment = fulfilment(
        PAYMENT_RETENTION_DAYS=31, EVENT_RETENTION_DAYS=30, FULFIL_UNLINKED_INVOICES="true"
    )
    s = f.settings
    # A customer's Checkout purchase with an invoice (the session ties the invoice to the
    # PaymentIntent: an alias), and a guest's, its PaymentIntent first (untied until then).
    session_a, invoice_a, intent_a = purchase(rng, "cus_retention_a")
    for event in (session_a, invoice_a, intent_a):
        record(f.ledger, s, event)
    session_b, invoice_b, intent_b = purchase(rng, guest=True)
    for event in (intent_b, session_b, invoice_b):
        record(f.ledger, s, event)
    # A card payment refunded after it was fulfilled, and one that never paid.
    card = samples.payment_events(rng)
    for event in card:
        record(f.ledger, s, event)
    never_paid = record(f.ledger, s, samples.event_of_type(rng, "payment_intent.payment_failed"))
    # An invoice without its PaymentIntent, fulfilled on its own; a guest's payment, never tied.
    invoice_e = samples.event_of_type(rng, "invoice.paid")
    invoice_e = about(
        invoice_e, payment_intent=None, customer="cus_retention_e", currency="usd", amount_paid=2500
    )
    record(f.ledger, s, invoice_e)
    untied = record(f.ledger, s, intent(rng, None, 3000))
    f.work()
    card_key = card[0]["data"]["object"]["id"]
    refund = samples.event_of_type(rng, "charge.refunded")
    record(f.ledger, s, about(refund, payment_intent=card_key))

    # The invoice's PaymentIntent (another amount: no possible duplicate) waits for a rate
    # slot; then the session ties the two, so it is held (its invoice had the effect) and a
    # person resolves it: it leaves the rate wait by another way than the gate.
    late = record(f.ledger, s, intent(rng, "cus_retention_e", 2100))
    redis.set(CLOCK, int(redis.time()[0]) * 1000)  # both asks in the same millisecond
    gate = Gate(redis, settings.load(FULFILMENT_MAX_RATE=1), clock_key=CLOCK)
    gate.admit(late, "job-taking-the-slot")  # the slot, unless a job just took it
    assert gate.admit(late, "job-that-waits", park_rate=True).reason == "rate"
    session_e = samples.event_of_type(rng, "checkout.session.completed")
    invoice_id = invoice_e["data"]["object"]["id"]
    record(
        f.ledger, s, about(session_e, payment_intent=late, invoice=invoice_id, amount_total=2100)
    )
    assert state_of(redis, late) == "held"
    f.work()  # its queued job finds it held
    assert decide(f.attempts, late, "resolve", "fulfilled", "test").state == "fulfilled"
    f.ledger.record_rejection("signature_mismatch", {"status": 400, "size": 10})
    f.sweep()
    still_queued = record(f.ledger, s, intent(rng, None, 3000))  # not purged: never worked

    settled = {
        k.decode(): state
        for state in ("fulfilled", "pending")
        for k in redis.zrange(keys.state_index(state), 0, -1)
    }
    assert never_paid in settled and late in settled and untied in settled
    assert all(settled_as(redis, pk, st) for pk, st in settled.items())
    events = {e for pk in settled for e in (redis.hget(keys.payment(pk), "events") or b"").split()}
    aliases = {
        k.decode().removeprefix(keys.ALIAS_PREFIX)
        for k in redis.scan_iter(match=keys.ALIAS_PREFIX + "*")
        if (redis.get(k) or b"").decode() in settled
    }
    # the invoices of A's and B's sessions, and the three sessions' own ids (ledger/landing.py)
    assert len(aliases) == 5 and sum(a.startswith("cs_") for a in aliases) == 3
    for pk, state in settled.items():  # as if each settled long ago
        redis.zadd(keys.state_index(state), {pk: 1})

    # Traffic after the retention window: another guest payment of the same amount as the
    # untied one, which trims the untied set, and the event index, to their windows.
    redis.set(CLOCK, int(redis.time()[0]) * 1000 + LATER_MS)
    later = Ledger(redis, s, clock_key=CLOCK)
    newest = record(later, s, intent(rng, None, 3000))

    assert f.attempts.purge() == len(settled)
    names = set(settled) | {e.decode() for e in events} | aliases
    assert leftovers(redis, names, LATER_MS) == {}
    assert redis.hget(keys.PAYMENT_STATE_COUNTS, "fulfilled") == b"0"
    for who in ("any", "guest"):
        members = redis.zrange(f"{keys.UNTIED_PREFIX}pi:test:{who}:usd:3000", 0, -1)
        assert members == [newest.encode()], (who, members, still_queued)
    for reason in keys.WAIT_REASONS:
        for pk in redis.zrange(keys.waiting(reason), 0, -1):
            assert redis.hget(keys.payment(pk.decode()), "waiting") == reason.encode()
