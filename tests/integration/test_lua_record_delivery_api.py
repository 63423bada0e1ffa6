"""Events found through Stripe's Events API (source ``api``): recorded through the same atomic
script as a delivery, counted as none; one event and one job per payment whichever of the
webhook and reconcile comes first, also when they race."""

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
from redis import Redis

from ledger import keys
from ledger.deliveries import API_SOURCE, Delivery, Ledger, Recorded, new_request_id
from ledger.events import classify
from ledger.read import events, payments
from ledger.read import stats as read_stats
from ledgerctl import bundle, samples
from tests.integration.test_lua_atomicity import dump
from tests.integration.test_lua_record_delivery import delivery, make_ledger
from tests.support.helpers import stats


def from_api(ledger: Ledger, event: dict[str, Any]) -> Recorded:
    """Record ``event`` as reconcile does: the API's JSON (not the delivered bytes)."""
    body = orjson.dumps(event)
    c = classify(event, ledger.settings.policy)
    return ledger.record_delivery(Delivery(event, body, c, "", API_SOURCE, new_request_id()))


def by_webhook(ledger: Ledger, event: dict[str, Any]) -> Recorded:
    return ledger.record_delivery(delivery(event, samples.encode(event)))


def queue_length(ledger: Ledger) -> int:
    return int(ledger.redis.llen(f"rq:queue:{ledger.settings.QUEUE_NAME}"))


def test_an_event_from_the_api_is_recorded_but_not_delivered(
    redis: Redis,
    redis_server,
    rng: random.Random,
    tmp_path: Path,
) -> None:
    ledger = make_ledger(redis_server.url)
    event = samples.payment_events(rng)[2]  # payment_intent.succeeded: paid
    pk = event["data"]["object"]["id"]
    answer = from_api(ledger, event)
    assert (answer.deliveries, answer.duplicate, answer.enqueued) == (0, False, True)
    record = events.event(redis, event["id"], with_payload=True)
    assert record is not None
    assert (record.deliveries, record.origin, record.payment_key, record.pays) == (
        0,
        "api",
        pk,
        True,
    )
    assert record.payload is not None and orjson.loads(record.payload) == event
    assert (record.last_delivered_at, record.secret_label, record.deliveries_by_source) == (
        None,
        None,
        {},
    )
    assert stats(redis) == {"events": 1, "reconciled": 1}
    assert not redis.exists(keys.SECRETS_LAST_SEEN)
    pay = payments.payment(redis, pk)
    assert pay is not None and pay.deliveries == 0
    assert pay.state == "queued" and queue_length(ledger) == 1
    assert sum(p.deliveries for p in read_stats.series(redis, 2).series) == 0
    bundle.export(redis, tmp_path / "b", str(ledger.settings.FULFILMENT_ACTION))
    assert bundle.verify(tmp_path / "b").failures == []


def test_a_webhook_after_reconcile_is_the_first_delivery(
    redis: Redis,
    redis_server,
    rng: random.Random,
) -> None:
    ledger = make_ledger(redis_server.url)
    event = samples.payment_events(rng)[2]
    from_api(ledger, event)
    first = by_webhook(ledger, event)  # other bytes than the API's JSON: no conflict
    assert (first.deliveries, first.duplicate, first.conflict, first.enqueued) == (1, 0, 0, 0)
    again = by_webhook(ledger, event)
    assert (again.deliveries, again.duplicate, again.conflict) == (2, True, False)
    other = {**event, "livemode": True}
    assert by_webhook(ledger, other).conflict  # another body than the delivered one
    assert stats(redis) == {
        "events": 1,
        "reconciled": 1,
        "deliveries": 3,
        "duplicates": 2,
        "conflicts": 1,
        "source:stripe": 3,
        "secret:primary": 3,
        "type:payment_intent.succeeded": 3,
    }
    record = events.event(redis, event["id"])
    assert record is not None and record.origin == "api" and record.deliveries == 3
    assert queue_length(ledger) == 1


def test_reconcile_after_a_webhook_changes_nothing_but_a_note(
    redis: Redis,
    redis_server,
    rng: random.Random,
) -> None:
    ledger = make_ledger(redis_server.url)
    event = samples.payment_events(rng)[2]
    by_webhook(ledger, event)
    before = dump(redis)
    answer = from_api(ledger, event)
    assert (answer.deliveries, answer.duplicate, answer.enqueued) == (1, True, False)
    after = dump(redis)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert {k.decode() for k in changed} <= {keys.event(event["id"])} | {
        k.decode() for k in after if k.startswith(keys.request("").encode())
    }
    confirmed = redis.hget(keys.event(event["id"]), "confirmed")
    assert confirmed is not None
    redis.hdel(keys.event(event["id"]), "confirmed")
    assert redis.dump(keys.event(event["id"])) == before[keys.event(event["id"]).encode()]


def test_webhook_and_reconcile_at_once_are_one_event_one_job(
    redis: Redis,
    redis_server,
    rng: random.Random,
) -> None:
    """Per paid event, 3 webhook copies and 2 reconcile runs start together (a barrier)."""
    ledger = make_ledger(redis_server.url)
    events = [samples.payment_events(rng)[2] for _ in range(40)]

    def race(event: dict[str, Any]) -> list[Recorded]:
        start = threading.Barrier(5)

        def one(kind: str) -> Recorded:
            start.wait()
            return by_webhook(ledger, event) if kind == "webhook" else from_api(ledger, event)

        with ThreadPoolExecutor(5) as pool:
            return list(pool.map(one, ["webhook"] * 3 + ["api"] * 2))

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(race, events))
    assert queue_length(ledger) == len(events)
    assert sum(a.enqueued for per_event in answers for a in per_event) == len(events)
    counters = stats(redis)
    from_the_api = sum(
        1 for e in events if redis.hget(keys.event(e["id"]), "origin") == API_SOURCE.encode()
    )
    assert counters["events"] == 40 and counters["deliveries"] == 120
    assert counters["duplicates"] == 80 and counters.get("reconciled", 0) == from_the_api
    for event in events:
        assert redis.hget(keys.event(event["id"]), "n") == b"3"
        pay = payments.payment(redis, event["data"]["object"]["id"])
        assert pay is not None and [e.id for e in pay.events] == [event["id"]]
        assert pay.deliveries == 3
    print(f"raced 40 events: {from_the_api} first recorded by reconcile, the rest by webhook")
