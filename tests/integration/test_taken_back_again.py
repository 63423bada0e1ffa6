"""A payment reversed once, granted again (by a person after Stripe gave it back, or
fulfilled again after a dispute won), then taken back again (refunded in full again, a
dispute lost). Its reversal does not run twice (its key was spent), so it is never left
`fulfilled` silently: it is held for a person, who takes it back by hand and resolves it,
and it is then `reversed` (docs/REVERSAL.md, "Taken back again")."""

from ledger import keys
from ledger.decisions import decide as decide_via_api
from ledger.read.payments import payment
from tests.integration.test_given_back import decide, fulfilled_then_refunded, refunded_in_full
from tests.integration.test_lua_reversal import Shop, reversed_then_won
from tests.support.constants import BASIC, BEARER
from tests.support.refunds import refund_failed


def granted_again(shop: Shop) -> None:
    """Fulfilled, refunded in full, reversed; the refund fails; a person grants it again."""
    events = fulfilled_then_refunded(shop)
    assert shop.attempt("reverse") == "reversed"
    assert shop.deliver(refund_failed(shop.rng, events[0])) == "held"
    assert decide(shop, "fulfilled") == ("ok", "fulfilled")


def test_granted_again_then_refunded_in_full_again_is_held_to_take_it_back_by_hand(
    redis, redis_server, rng
) -> None:
    """Before, the second refund was only recorded: refunded twice over and still granted."""
    shop = Shop(redis_server, rng)
    granted_again(shop)
    refunded_in_full(shop)  # the merchant refunds it again, and that one succeeds
    assert (shop.state(), shop.field("by_hand"), shop.field("retake")) == ("held", "1", "refund")
    assert shop.field("hold_reason").startswith(
        "refunded in full after it was granted again: the ledger does not reverse it a second"
    )
    assert redis.hget(keys.STATS, "reversals") == b"1" and shop.field("leg") == ""
    assert decide(shop, "retry") == ("by_hand", "held")
    assert decide(shop, "fulfilled") == ("ok", "reversed")
    assert (shop.field("leg"), shop.field("retake"), shop.field("by_hand")) == ("reverse", "", "")
    assert shop.field("retaken_at") and redis.hget(keys.STATS, "resolved_reversed") == b"1"


def test_each_event_of_the_taking_again_holds_it_once(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    granted_again(shop)
    held = int(redis.hget(keys.STATS, "held"))
    for _ in range(2):
        refunded_in_full(shop)
    assert shop.state() == "held" and int(redis.hget(keys.STATS, "held")) == held + 1


def test_given_back_while_held_to_take_it_back_it_stays_held_to_grant(
    redis, redis_server, rng
) -> None:
    """The second refund fails too before the person resolved it: they may have taken it
    back already, so it stays theirs, now to make sure it is granted; no longer said taken
    back, counted as given back once more."""
    shop = Shop(redis_server, rng)
    granted_again(shop)
    second = refunded_in_full(shop)
    assert shop.state() == "held"
    assert shop.deliver(refund_failed(rng, second[0])) == "held"
    assert (shop.field("retake"), shop.field("by_hand"), shop.field("taken_back")) == ("", "1", "")
    assert shop.field("hold_reason").startswith("Stripe gave it back (a refund failed or was")
    assert redis.hget(keys.STATS, "reinstated") == b"2"
    assert decide(shop, "fulfilled") == ("ok", "fulfilled")


def test_taken_back_by_hand_then_given_back_is_held_to_grant_again(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    granted_again(shop)
    second = refunded_in_full(shop)
    assert decide(shop, "fulfilled") == ("ok", "reversed")
    assert shop.deliver(refund_failed(rng, second[0])) == "held"
    assert shop.field("hold_reason").startswith("a refund failed or was canceled after its")


def test_fulfilled_again_after_a_dispute_won_then_refunded_in_full_is_held(
    redis, redis_server, rng
) -> None:
    """REVERSAL_DISPUTE_WON=fulfil: the dispute lost reversed it, the dispute won fulfilled
    it again under its own key; a refund in full after that is a person's."""
    shop = reversed_then_won(redis_server, rng)
    assert shop.attempt("refulfil") == "fulfilled"
    refunded_in_full(shop)
    assert (shop.state(), shop.field("retake")) == ("held", "refund")


def test_fulfilled_again_given_back_then_refunded_in_full_again_is_held_not_unfulfilled(
    redis, redis_server, rng
) -> None:
    """Fulfilled again after a dispute won, refunded in full (held to take it back by hand),
    that refund failed (held to make sure it is granted), then refunded in full again: the
    re-grant may stand, so it is held to take it back by hand again, never
    `refunded_unfulfilled` over it (the protocol explorer's program)."""
    shop = reversed_then_won(redis_server, rng)
    assert shop.attempt("refulfil") == "fulfilled"
    first = refunded_in_full(shop)
    assert shop.deliver(refund_failed(rng, first[0])) == "held"
    assert shop.field("hold_reason").startswith("Stripe gave it back (a refund failed or was")
    refunded_in_full(shop)
    assert (shop.state(), shop.field("retake"), shop.field("by_hand")) == ("held", "refund", "1")
    assert shop.field("hold_reason").startswith("refunded in full after it was granted again")
    assert decide(shop, "fulfilled") == ("ok", "reversed")


def test_a_fulfilment_again_resolved_by_a_person_after_a_refund_in_full_is_held(
    redis, redis_server, rng
) -> None:
    """Its attempt interrupted, refunded in full, then a person finds the re-grant applied:
    before, it stayed fulfilled though refunded."""
    shop = reversed_then_won(redis_server, rng)
    assert shop.attempt("refulfil", "interrupted") == "interrupted"
    refunded_in_full(shop)
    verdict = shop.attempts.record_decision(shop.pk, "fulfilled", ("interrupted",), "ops:eve")
    assert verdict == ("ok", "held") and shop.field("retake") == "refund"


def test_a_fulfilment_again_that_may_have_applied_then_refunded_is_held_not_reversed(
    redis, redis_server, rng
) -> None:
    """Its call got no clear answer (retrying), then a refund in full: before, its next job
    withdrew it as `reversed`, though the re-grant may exist under refulfil:{pk}."""
    shop = reversed_then_won(redis_server, rng)
    assert shop.attempt("refulfil", "retry") == "retrying"
    refunded_in_full(shop)
    assert shop.field("leg") == "refulfil"
    shop.redis.hset(keys.payment(shop.pk), "next_at", 0)  # its backoff is over
    start = shop.attempts.start(shop.pk, "job-next", True, leg="refulfil")
    assert start.reason == "taken_back" and shop.state() == "held"
    assert shop.field("retake") == "refund" and shop.field("by_hand") == "1"
    assert f"refulfil:{shop.pk}" in shop.field("hold_reason")
    assert decide(shop, "fulfilled") == ("ok", "reversed")


def test_a_fulfilment_again_that_never_called_then_refunded_stays_reversed(
    redis, redis_server, rng
) -> None:
    shop = reversed_then_won(redis_server, rng)
    refunded_in_full(shop)
    start = shop.attempts.start(shop.pk, "job-next", True, leg="refulfil")
    assert start.reason == "taken_back" and shop.state() == "reversed"


def test_without_a_reversal_action_it_is_only_recorded(redis, redis_server, rng) -> None:
    """REVERSAL_ACTION unset since: as any fulfilled payment refunded, the effect stays."""
    shop = Shop(redis_server, rng)
    granted_again(shop)
    bare = Shop(redis_server, rng, reverse=False)
    bare.pk, bare.amount = shop.pk, shop.amount
    refunded_in_full(bare)
    assert (shop.state(), shop.field("retake")) == ("fulfilled", "")


def test_the_read_model_and_the_refusal_say_what_a_person_does(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    granted_again(shop)
    refunded_in_full(shop)
    detail = payment(redis, shop.pk)
    assert detail is not None and detail.by_hand and detail.reversal is not None
    assert detail.reversal.taken_back_again == "refund"
    refused = decide_via_api(shop.attempts, shop.pk, "retry", "retry", "ops:bob")
    assert getattr(refused, "error", "") == "grant_by_hand"
    assert "took it back again after it was granted again" in refused.message  # type: ignore[union-attr]
    decide(shop, "fulfilled")
    detail = payment(redis, shop.pk)
    assert detail is not None and detail.reversal is not None
    assert detail.reversal.taken_back_again is None and detail.reversal.taken_back_by_hand_at


def test_the_dashboard_and_the_ops_api_show_it(client, redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    granted_again(shop)
    refunded_in_full(shop)
    page = client.get(f"/ops/payments/{shop.pk}", headers=BASIC).get_data(as_text=True)
    assert 'id="taken-back-again">refunded in full after it was granted again' in page
    assert 'id="retake"' in page and "Taken back by hand: mark reversed" in page
    assert 'id="reinstated"' not in page and "It was not: run" not in page
    answer = client.post(f"/ops/api/payments/{shop.pk}/retry", headers=BEARER)
    assert answer.status_code == 409 and answer.get_json()["error"] == "grant_by_hand"
    answer = client.post(f"/ops/api/payments/{shop.pk}/resolve?as=fulfilled", headers=BEARER)
    assert answer.status_code == 200 and answer.get_json()["state"] == "reversed"
    shown = client.get(f"/ops/api/payments/{shop.pk}", headers=BEARER).get_json()
    r = shown["reversal"]
    assert r["taken_back_again"] is None and r["taken_back_by_hand_at"]
    assert shown["resolution"]["meant"] == "taken back by hand: reversed"  # not "fulfilled"
    page = client.get(f"/ops/payments/{shop.pk}", headers=BASIC).get_data(as_text=True)
    assert (
        'id="taken-back-by-hand-at"' in page and ": taken back by hand: reversed (was held)" in page
    )
