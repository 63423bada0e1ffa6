"""The ledger script: exact counts under retries and concurrency, payment records, retention."""

import hashlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ledger import keys, settings
from ledger.connection import connect
from ledger.deliveries import Ledger
from ledger.payloads import decompress_payload
from ledger.read import payments
from ledgerctl import samples
from tests.support.helpers import delivery, paid_event, stats
from tests.support.processes import wait_until


def make_ledger(url: str, **overrides: object) -> Ledger:
    s = settings.load(
        {}, REDIS_URL=url, STRIPE_WEBHOOK_SECRET="whsec_x", STRIPE_MODE="test", **overrides
    )
    return Ledger(connect(s), s)


def test_same_request_id_counts_once(redis: Redis, redis_server, rng) -> None:
    ledger = make_ledger(redis_server.url)
    event, body = paid_event(rng)
    d = delivery(event, body, "req-1")
    first, second = ledger.record_delivery(d), ledger.record_delivery(d)
    assert first == second and first.deliveries == 1
    assert stats(redis)["deliveries"] == 1
    assert redis.llen(f"rq:queue:{ledger.settings.QUEUE_NAME}") == 1


def _stalled(redis: Redis) -> bool:
    """Whether the server has stopped answering (it is inside DEBUG SLEEP)."""
    kwargs = redis.connection_pool.connection_kwargs
    probe = Redis(
        host=kwargs["host"], port=kwargs["port"], socket_timeout=0.1, retry=Retry(NoBackoff(), 0)
    )
    try:
        probe.ping()
        return False
    except RedisTimeoutError:
        return True
    finally:
        probe.close()


def test_client_timeout_and_retry_counts_once(redis: Redis, redis_server, rng) -> None:
    """Redis runs the write after the client gave up on it; redis-py sends it again.

    DEBUG SLEEP stalls the server with our FCALL already in its socket: the first copy
    is executed late (its reply lost to the client's timeout), the retry is executed too.
    The request id makes the second execution return the first answer unchanged.
    """
    ledger = make_ledger(redis_server.url, REDIS_SOCKET_TIMEOUT=0.2, REDIS_RETRIES=5)
    event, body = paid_event(rng)
    ledger.record_delivery(delivery(*paid_event(rng)))  # scripts loaded, connection open
    redis.config_resetstat()
    stall = threading.Thread(target=redis.execute_command, args=("DEBUG", "SLEEP", "0.6"))
    stall.start()
    wait_until(lambda: _stalled(redis), what="DEBUG SLEEP running")
    recorded = ledger.record_delivery(delivery(event, body))
    stall.join()
    assert redis.info("commandstats")["cmdstat_fcall"]["calls"] == 2, "executed twice"
    assert recorded.deliveries == 1
    assert redis.hget(keys.event(event["id"]), "n") == b"1"
    assert stats(redis)["deliveries"] == 2  # the warm-up delivery and this one


def test_concurrent_copies_are_counted_exactly(redis: Redis, redis_server, rng) -> None:
    ledger = make_ledger(redis_server.url)
    event, body = paid_event(rng)
    start = threading.Barrier(50)

    def send(_: int) -> int:
        start.wait()
        return ledger.record_delivery(delivery(event, body)).deliveries

    with ThreadPoolExecutor(50) as pool:
        answers = sorted(pool.map(send, range(50)))
    assert answers == list(range(1, 51))
    counters = stats(redis)
    assert (counters["deliveries"], counters["events"], counters["duplicates"]) == (50, 1, 49)
    assert redis.llen(f"rq:queue:{ledger.settings.QUEUE_NAME}") == 1


def test_event_record_holds_metadata_and_payload(redis: Redis, redis_server, rng) -> None:
    ledger = make_ledger(redis_server.url)
    event, body = paid_event(rng)
    ledger.record_delivery(delivery(event, body))
    record = redis.hgetall(keys.event(event["id"]))
    assert record[b"type"] == b"payment_intent.succeeded"
    assert record[b"created"] == str(event["created"]).encode()
    assert record[b"livemode"] == b"0" and record[b"api"] == b"2020-08-27"
    assert record[b"pk"] == event["data"]["object"]["id"].encode()
    assert record[b"sha"] == hashlib.sha256(body).hexdigest().encode()
    assert decompress_payload(record[b"body"]) == body
    assert len(record[b"body"]) < len(body) / 2
    assert record[b"src:stripe"] == b"1" and record[b"first"] == record[b"last"]


def test_retention(redis: Redis, redis_server, rng) -> None:
    ledger = make_ledger(redis_server.url, EVENT_RETENTION_DAYS=2)
    event, body = paid_event(rng)
    ledger.record_delivery(delivery(event, body))
    pay_key = keys.payment(event["data"]["object"]["id"])
    assert 2 * 86400 - 5 <= redis.ttl(keys.event(event["id"])) <= 2 * 86400
    assert redis.ttl(pay_key) == -1


def test_payment_groups_its_events_and_queues_once(redis: Redis, redis_server, rng) -> None:
    ledger = make_ledger(redis_server.url)
    events = samples.payment_events(rng, checkout=True)
    results = [ledger.record_delivery(delivery(e, samples.encode(e))) for e in reversed(events)]
    assert [r.enqueued for r in results] == [True, False, False, False]
    pk = events[0]["data"]["object"]["id"]
    record = redis.hgetall(keys.payment(pk))
    assert record[b"state"] == b"queued"
    assert set(record[b"events"].decode().split()) == {e["id"] for e in events}
    assert record[b"paid_by"] == events[-1]["id"].encode()  # the paid event came first
    assert getattr(payments.payment(redis, pk), "paid_by", None) == events[-1]["id"]
    assert redis.hgetall(keys.PAYMENT_STATE_COUNTS) == {b"queued": b"1", b"pending": b"0"}
    job_id = record[b"job"].decode()
    assert redis.lrange(f"rq:queue:{ledger.settings.QUEUE_NAME}", 0, -1) == [job_id.encode()]
    assert redis.hget(f"rq:job:{job_id}", "status") == b"queued"


@pytest.mark.parametrize("event_type", ["customer.updated", "charge.refund.updated"])
def test_events_without_a_payment_are_recorded_and_ignored(
    redis: Redis,
    redis_server,
    rng,
    event_type: str,
) -> None:
    ledger = make_ledger(redis_server.url)
    event = {"id": "evt_x1", "type": event_type, "data": {"object": {"id": "cus_1"}}}
    body = samples.encode(event)
    assert ledger.record_delivery(delivery(event, body)).payment_state == ""
    assert redis.hget(keys.event("evt_x1"), "pk") == b""
    assert not list(redis.scan_iter(match=keys.payment("*")))


def test_payloads_compress_well_even_unlike_the_dictionary() -> None:
    """The preset dictionary is made of the shipped templates; an event from elsewhere
    (a subscription invoice from another project's fixtures) still round-trips and shrinks."""
    from ledger.payloads import compress_payload, decompress_payload

    other = json.dumps(
        {
            "id": "evt_1KJqKB",
            "object": "event",
            "type": "invoice.paid",
            "data": {
                "object": {
                    "id": "in_1KJqKB",
                    "object": "invoice",
                    "billing_reason": "subscription_cycle",
                    "lines": {
                        "data": [
                            {
                                "id": "il_1",
                                "amount": 1500,
                                "description": "1 x Pro (at $15.00 / month)",
                                "period": {"start": 1642000000, "end": 1644678400},
                            }
                        ]
                        * 3
                    },
                    "status": "paid",
                    "paid": True,
                    "amount_paid": 1500,
                    "currency": "usd",
                }
            },
        },
        indent=2,
    ).encode()
    packed = compress_payload(other)
    assert decompress_payload(packed) == other
    assert len(packed) < len(other) / 3
