"""Thin events (``"object": "v2.core.event"``, a ``related_object``, no ``data.object``) from
Stripe's event destinations: recorded and counted like any delivery, never fulfilled unless
the thin-event table maps them (and PAID_EVENT_TYPES lists them)."""

import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest
from redis import Redis
from stripe import StripeClient
from stripe.events import V1PaymentIntentSucceededEventNotification

from ledger import keys
from ledger.read import events, payments
from ledger.read.events import RelatedObject
from ledgerctl import samples
from tests.integration.test_intake import assert_rejected
from tests.integration.test_ops import BASIC
from tests.support.constants import BEARER, SECRET
from tests.support.helpers import run_cli, signed_headers, state_of, stats
from tests.support.refunds import refund_events
from webhook import create_app

QUEUE = "rq:queue:fulfilment"


def thin_event(
    rng: random.Random, event_type: str, related: dict[str, str] | None, **extra: Any
) -> dict[str, Any]:
    """A thin event as an event destination sends it."""
    event = {
        "id": samples.random_id(rng, "evt_test", 46),
        "object": "v2.core.event",
        "type": event_type,
        "livemode": False,
        "created": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "reason": {
            "type": "request",
            "request": {"id": samples.random_id(rng, "req", 14), "idempotency_key": "k-1"},
        },
        **extra,
    }
    if related is not None:
        event["related_object"] = related
    return event


def payment_intent(pi: str) -> dict[str, str]:
    return {"id": pi, "type": "payment_intent", "url": f"/v1/payment_intents/{pi}"}


def post(client, event: dict[str, Any]):
    body = json.dumps(event, indent=2).encode()
    return client.post("/webhooks/stripe", data=body, headers=signed_headers(body))


def test_the_payload_is_what_stripe_python_parses(rng: random.Random) -> None:
    pi = samples.random_id(rng, "pi")
    body = json.dumps(thin_event(rng, "v1.payment_intent.succeeded", payment_intent(pi)))
    header = samples.sign(body.encode(), SECRET)
    parsed = StripeClient("sk_test_unused").parse_event_notification(body, header, SECRET)
    assert isinstance(parsed, V1PaymentIntentSucceededEventNotification)
    assert (parsed.related_object.id, parsed.related_object.type) == (pi, "payment_intent")


def test_a_thin_event_is_recorded_and_counted_but_does_not_fulfil(
    client,
    redis: Redis,
    rng: random.Random,
) -> None:
    pi = samples.random_id(rng, "pi")
    event = thin_event(rng, "v1.payment_intent.succeeded", payment_intent(pi))
    first, again = post(client, event), post(client, event)
    assert first.status_code == again.status_code == 200
    assert (first.get_json()["deliveries"], again.get_json()["duplicate"]) == (1, True)
    record = events.event(redis, event["id"])
    assert record is not None
    assert (record.thin, record.related_object, record.payment_key) == (
        True,
        RelatedObject(type="payment_intent", id=pi),
        pi,
    )
    assert (record.role, record.pays, record.deliveries) == ("info", False, 2)
    counters = stats(redis)
    assert (counters["deliveries"], counters["events"], counters["duplicates"]) == (2, 1, 1)
    assert counters["type:v1.payment_intent.succeeded"] == 2
    assert state_of(redis, pi) == "pending" and redis.llen(QUEUE) == 0
    page = client.get(f"/ops/events/{event['id']}", headers=BASIC).get_data(as_text=True)
    assert 'id="event-reason"' in page and "<code>thin</code>" in page and pi in page


@pytest.mark.parametrize(
    ("event_type", "related"),
    [
        ("v1.charge.succeeded", {"id": "ch_1", "type": "charge", "url": "/v1/charges/ch_1"}),
        ("v1.checkout.session.completed", {"id": "cs_1", "type": "checkout.session", "url": "/"}),
        ("v1.billing.meter.error_report_triggered", {"id": "mtr_1", "type": "billing.meter"}),
        ("v1.payment_intent.succeeded", {"id": "ch_1", "type": "charge", "url": "/"}),
        ("v2.core.event_destination.ping", {"type": "v2.core.event_destination", "url": "/"}),
        ("v2.core.event_destination.ping", None),
    ],
)
def test_thin_events_the_table_does_not_map_join_no_payment(
    client,
    redis: Redis,
    rng: random.Random,
    event_type: str,
    related: dict[str, str] | None,
) -> None:
    event = thin_event(rng, event_type, related)
    assert post(client, event).status_code == 200
    record = events.event(redis, event["id"])
    assert record is not None and record.thin and record.payment_key is None
    assert not list(redis.scan_iter(match=keys.payment("*")))


def test_a_mapped_thin_event_fulfils_once_when_paid_types_list_it(
    config: dict[str, object],
    redis: Redis,
    rng: random.Random,
) -> None:
    paid_types = ("payment_intent.succeeded", "v1.payment_intent.succeeded")
    client = create_app({**config, "PAID_EVENT_TYPES": paid_types}).test_client()
    snapshot = samples.payment_events(rng)[2]
    pi = snapshot["data"]["object"]["id"]
    thin = thin_event(rng, "v1.payment_intent.succeeded", payment_intent(pi))
    assert post(client, thin).status_code == 200
    assert state_of(redis, pi) == "queued" and redis.llen(QUEUE) == 1
    assert post(client, snapshot).status_code == 200  # the same payment, as a snapshot event
    timeline = payments.payment(redis, pi)
    assert timeline is not None and [e.id for e in timeline.events] == [thin["id"], snapshot["id"]]
    assert [e.type for e in timeline.events] == [thin["type"], snapshot["type"]]
    assert redis.llen(QUEUE) == 1
    connect = thin_event(
        rng, "v1.payment_intent.succeeded", payment_intent("pi_connect"), context="acct_1"
    )
    assert post(client, connect).status_code == 200
    held = payments.payment(redis, "pi_connect")
    assert held is not None and held.state == "held" and "acct_1" in (held.hold_reason or "")


@pytest.mark.parametrize(
    "broken",
    [
        {"related_object": "pi_1"},
        {"related_object": {"id": "pi_1"}},
        {"related_object": {"id": 12, "type": "payment_intent"}},
        {"related_object": {"id": "", "type": "payment_intent"}},
        {"id": "pi_1"},
        {"type": None},
    ],
)
def test_a_broken_thin_event_is_not_a_stripe_event(
    client,
    redis: Redis,
    rng: random.Random,
    broken: dict[str, Any],
) -> None:
    event = {**thin_event(rng, "v1.payment_intent.succeeded", payment_intent("pi_1")), **broken}
    assert_rejected(post(client, event), redis, "not_a_stripe_event")


@pytest.mark.parametrize("refunded_before_snapshot", [False, True])
def test_a_payment_paid_by_a_thin_event_first_is_refunded_by_its_snapshot_amount(
    config: dict[str, object],
    redis: Redis,
    rng: random.Random,
    refunded_before_snapshot: bool,
) -> None:
    """A thin paid event carries no amount: the snapshot paid event after it gives it, so a
    refund in full before fulfilment, recorded before or after that snapshot, is seen as one
    and the payment is never fulfilled."""
    paid_types = ("payment_intent.succeeded", "v1.payment_intent.succeeded")
    client = create_app({**config, "PAID_EVENT_TYPES": paid_types}).test_client()
    snapshot = samples.payment_events(rng)[2]
    pi, amount = snapshot["data"]["object"]["id"], snapshot["data"]["object"]["amount_received"]
    thin = thin_event(rng, "v1.payment_intent.succeeded", payment_intent(pi))
    refunds = refund_events(rng, pi, amount, amount)
    later = [*refunds, snapshot] if refunded_before_snapshot else [snapshot, *refunds]
    for event in [thin, *later]:
        assert post(client, event).status_code == 200
    assert redis.hmget(keys.payment(pi), "amount", "currency") == [str(amount).encode(), b"usd"]
    assert state_of(redis, pi) == "refunded_unfulfilled"


def test_a_refund_of_a_payment_only_a_thin_event_paid_is_shown_counted(
    config: dict[str, object], redis: Redis, rng: random.Random
) -> None:
    """Paid only by its thin event (no amount, no currency), then refunded in part: the
    refund is counted, and the payment's page and ``webhook-ledger payment`` say so in minor
    units rather than calling it failed or canceled."""
    paid_types = ("payment_intent.succeeded", "v1.payment_intent.succeeded")
    client = create_app({**config, "PAID_EVENT_TYPES": paid_types}).test_client()
    pi = samples.random_id(rng, "pi")
    created = refund_events(rng, pi, 2000, 500)[0]
    for event in (thin_event(rng, "v1.payment_intent.succeeded", payment_intent(pi)), created):
        assert post(client, event).status_code == 200
    shown = client.get(f"/ops/api/payments/{pi}", headers=BEARER).get_json()["reversal"]
    assert [(f["amount"], f["counted"]) for f in shown["refunds"]] == [(None, True)]
    page = client.get(f"/ops/payments/{pi}", headers=BASIC).get_data(as_text=True)
    assert "failed or canceled" not in page and "500 minor units" in page
    cli = run_cli(config, "payment", pi)
    assert "failed or canceled" not in cli.stdout and "500 minor units" in cli.stdout
