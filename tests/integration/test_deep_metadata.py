"""A signed event whose metadata is nested as deep as orjson parses (1,024 levels): only a
holder of the webhook secret can send one, Stripe never does (its metadata values are
strings), and it is still a verified delivery: recorded, never a 500 that records nothing."""

import orjson
from redis import Redis

from ledger import keys
from ledger.purchase import read_purchase
from ledgerctl import samples
from tests.support.constants import BEARER
from tests.support.helpers import payment_key_of, signed_headers, stats
from tests.support.purchases import purchase_validator

DEPTH = 1010
"""Past Python's recursion limit (1,000), within orjson's parse limit (1,024)."""


def deep_metadata_event(rng) -> tuple[dict, bytes]:
    event = next(e for e in samples.payment_events(rng) if e["type"] == "payment_intent.succeeded")
    event["data"]["object"]["metadata"] = {"order": "7", "deep": "DEEP"}
    nested = b'{"a":' * DEPTH + b'"x"' + b"}" * DEPTH
    return event, orjson.dumps(event).replace(b'"DEEP"', nested)


def test_deeply_nested_metadata_is_recorded_without_the_nested_value(
    client, redis: Redis, rng
) -> None:
    event, body = deep_metadata_event(rng)
    answer = client.post("/webhooks/stripe", data=body, headers=signed_headers(body))
    assert answer.status_code == 200, answer.get_data()[:300]
    assert answer.get_json() == {"event_id": event["id"], "deliveries": 1, "duplicate": False}
    assert redis.exists(keys.event(event["id"]))
    assert "rejected" not in stats(redis)
    got = read_purchase(redis, payment_key_of(event), 1).to_dict()
    assert purchase_validator().is_valid(got)
    assert got["metadata"]["payment_intent"] == {"order": "7"}  # the string values, kept


def test_its_event_and_payment_are_shown(client, redis: Redis, rng) -> None:
    event, body = deep_metadata_event(rng)
    answer = client.post("/webhooks/stripe", data=body, headers=signed_headers(body))
    assert answer.status_code == 200
    for path in (
        f"/ops/api/events/{event['id']}",
        f"/ops/api/events/{event['id']}?payload=1",
        f"/ops/api/payments/{payment_key_of(event)}",
        f"/ops/events/{event['id']}",
        f"/ops/payments/{payment_key_of(event)}",
    ):
        answer = client.get(path, headers=BEARER)
        assert answer.status_code == 200, (path, answer.get_data()[:300])
