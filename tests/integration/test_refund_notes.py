"""A refund's and a dispute's reason and metadata reach the reversal, through the real
scripts: what a merchant's refund names (one line item) is what its reversal is told, as
the latest of the refund's events said it, in any order of delivery (ledger/refund_notes.py,
refunds.lua keep_notes)."""

import itertools
import json
import random

import pytest
from redis import Redis

from ledger import deliveries, keys
from ledger.deliveries import LedgerUnavailable
from ledger.limits import NOTES_KEPT
from ledger.purchase import purchase_of, stored_fields
from ledger.reversals import ReversalCall, reversal_of
from tests.integration.test_lua_reversal import Shop, per_refund_shop
from tests.support.refunds import dispute_closed, refund_events


def due_reversal(shop: Shop) -> tuple[ReversalCall, str]:
    """The reversal call due and its attempt's token, from the fields a worker reads."""
    start = shop.attempts.start(shop.pk, f"job-{shop.rng.random()}", True, leg="reverse")
    assert start.verdict == "go", start
    stored = stored_fields(shop.redis, shop.pk)
    return reversal_of(purchase_of(shop.pk, start.token, stored), stored), start.token


def noted(events: list[dict], reason: str | None, metadata: dict[str, str]) -> None:
    """The refund in each of its events with ``reason`` and ``metadata``, as Stripe sends
    them once the refund was made with them."""
    for event in events:
        obj = event["data"]["object"]
        for refund in obj["refunds"]["data"] if obj["object"] == "charge" else [obj]:
            refund["reason"], refund["metadata"] = reason, dict(metadata)


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_each_refunds_reversal_is_told_its_own_reason_and_metadata_in_any_order(
    redis: Redis, redis_server, rng: random.Random, order
) -> None:
    shop = per_refund_shop(redis_server, rng)
    first = refund_events(rng, shop.pk, shop.amount, 500)
    noted(first, "requested_by_customer", {"line_item": "li_socks"})
    # the metadata was changed after the refund was made: refund.updated, a minute later
    first[2]["created"] += 60
    first[2]["data"]["object"]["metadata"] = {"line_item": "li_socks", "ticket": "T-7"}
    for i in order:
        shop.deliver(first[i])
    call, token = due_reversal(shop)
    refund_id = first[0]["data"]["object"]["id"]
    assert call.reversal.refund_id == refund_id and call.reversal.amount == 500
    assert call.reversal.refund_reason == "requested_by_customer"
    assert call.reversal.refund_metadata == {"line_item": "li_socks", "ticket": "T-7"}
    shop.attempts.finish(shop.pk, token, "fulfilled", "{}", 1.0)

    second = refund_events(rng, shop.pk, shop.amount, 300, refunded_before=500)
    noted(second, "duplicate", {"line_item": "li_hat"})
    for event in second:
        shop.deliver(event)
    call, _ = due_reversal(shop)
    assert (call.reversal.refund_reason, call.reversal.refund_metadata) == (
        "duplicate",
        {"line_item": "li_hat"},
    )
    by_id = {r.id: (r.amount, r.reason, r.metadata) for r in call.reversal.refunds}
    assert by_id[refund_id] == (
        500,
        "requested_by_customer",
        {"line_item": "li_socks", "ticket": "T-7"},
    )
    assert len(by_id) == 2 and call.reversal.refund_ids == sorted(by_id)


def test_a_refund_in_full_lists_every_refund_and_a_lost_dispute_its_reason(
    redis: Redis, redis_server, rng: random.Random
) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.attempt() == "fulfilled"
    events = refund_events(rng, shop.pk, shop.amount, shop.amount)  # made without either
    for event in events:
        shop.deliver(event)
    call, _ = due_reversal(shop)
    assert (call.reversal.refund_reason, call.reversal.refund_metadata) == (None, None)
    [only] = call.reversal.refunds
    assert (only.amount, only.reason, only.metadata) == (shop.amount, None, {})

    disputed = Shop(redis_server, rng)
    disputed.deliver(disputed.paid)
    assert disputed.attempt() == "fulfilled"
    lost = dispute_closed(rng, disputed.pk, disputed.amount, "lost")
    lost["data"]["object"].update(reason="product_not_received", metadata={"case": "C-1"})
    assert disputed.deliver(lost) == "queued"
    call, _ = due_reversal(disputed)
    assert (call.reversal.why, call.reversal.dispute_reason) == ("dispute", "product_not_received")
    assert json.loads(disputed.field("notes"))[call.reversal.dispute_id][2] == {"case": "C-1"}


def test_notes_of_the_wrong_shape_are_refused_before_anything_is_written(
    redis: Redis, redis_server, rng: random.Random, monkeypatch: pytest.MonkeyPatch
) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    before = shop.redis.hgetall(keys.payment(shop.pk))
    bad = {"refunds": {"re_1": 100}, "notes": {"re_1": ["yesterday", None, {}]}}
    monkeypatch.setattr(deliveries, "taken_of", lambda *_: json.dumps(bad))
    event = refund_events(rng, shop.pk, shop.amount, 100)[0]
    with pytest.raises(LedgerUnavailable, match="taken.notes must map ids"):
        shop.deliver(event)
    assert shop.redis.hgetall(keys.payment(shop.pk)) == before
    assert not shop.redis.exists(keys.event(event["id"]))


@pytest.mark.parametrize("updated_first", [True, False])
def test_an_update_in_the_same_second_as_the_refund_is_the_note_in_either_order(
    redis: Redis, redis_server, rng: random.Random, updated_first: bool
) -> None:
    """Metadata set in the second the refund was made: ``refund.updated`` carries it,
    ``refund.created`` and ``charge.refunded`` do not; Stripe sends them in any order."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    events = refund_events(rng, shop.pk, shop.amount, 100)
    noted(events[:2], None, {})
    noted(events[2:], None, {"line_item": "li_socks"})
    for event in [events[2], *events[:2]] if updated_first else events:
        shop.deliver(event)
    refund_id = events[0]["data"]["object"]["id"]
    assert json.loads(shop.field("notes"))[refund_id][2] == {"line_item": "li_socks"}


def test_a_payment_keeps_at_most_notes_kept_notes(
    redis: Redis, redis_server, rng: random.Random
) -> None:
    """A payment refunded in many small parts keeps the notes of its first NOTES_KEPT refunds:
    the field every refund event decodes and writes again stays bounded."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    assert shop.amount > NOTES_KEPT
    made = []
    for _ in range(NOTES_KEPT + 3):
        created = refund_events(rng, shop.pk, shop.amount, 1)[0]
        noted([created], "requested_by_customer", {"line_item": "li_x"})
        shop.deliver(created)
        made.append(created["data"]["object"]["id"])
    notes = json.loads(shop.field("notes"))
    assert set(notes) == set(made[:NOTES_KEPT])
    assert len(json.loads(shop.field("rf"))) == NOTES_KEPT + 3  # every refund still counts
