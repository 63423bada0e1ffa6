"""Held for a person after it was taken back while a replay-safe call may have applied it
(refunded in full, a dispute lost), then given back by Stripe before the person decided:
its reason says so, and offers what a person can do now (docs/REVERSAL.md, "When Stripe
gives it back")."""

import pytest

from tests.integration.test_given_back import T, dated
from tests.integration.test_lua_reversal import Shop
from tests.support.protocol.constants import MAY_HAVE_APPLIED
from tests.support.refunds import dispute_closed, refund_events, refund_failed


def held_after_a_call(shop: Shop, lost: bool) -> list[dict]:
    """A call with no answer (it may have applied), then refunded in full or a dispute lost:
    held (the action cannot settle it). Returns the events that took it back."""
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", True, settles=False)
    assert start.verdict == "go"
    assert shop.attempts.finish(shop.pk, start.token, "retry", "no answer", 1.0)[1] == "retrying"
    if lost:
        events = [dispute_closed(shop.rng, shop.pk, shop.amount, "lost")]
    else:
        events = refund_events(shop.rng, shop.pk, shop.amount, shop.amount)
    for event in events:
        assert shop.deliver(event) == "held"
    said = "dispute lost" if lost else "refunded in full"
    assert shop.field("hold_reason").startswith(f"{said} {MAY_HAVE_APPLIED}: check")
    return events


def give_back(shop: Shop, taken: list[dict], lost: bool) -> str:
    if lost:
        return shop.deliver(dispute_closed(shop.rng, shop.pk, shop.amount, "won"))
    return shop.deliver(refund_failed(shop.rng, taken[0]))


@pytest.mark.parametrize("lost", [False, True])
def test_given_back_while_held_it_says_so_and_a_retry_fulfils_it(
    redis, redis_server, rng, lost
) -> None:
    shop = Shop(redis_server, rng)
    taken = held_after_a_call(shop, lost)
    assert give_back(shop, taken, lost) == "held"
    given = "its dispute was won" if lost else "a refund failed or was canceled"
    said = "dispute lost" if lost else "refunded in full"
    reason = shop.field("hold_reason")
    assert reason.startswith(f"{given} while it was held ({said} {MAY_HAVE_APPLIED}): ")
    assert "the customer paid; retry it" in reason and "not applied" not in reason
    # what the reason offers is what a person can do: not applied is refused, a retry runs
    verdict = shop.attempts.record_decision(shop.pk, "not_applied", ("held",), "ops:alice")
    assert verdict == ("not_taken_back", "held")
    assert shop.attempts.record_decision(shop.pk, "retry", ("held",), "ops:alice") == (
        "ok",
        "queued",
    )
    assert shop.attempt() == "fulfilled"


def test_taken_back_again_while_held_it_says_taken_back_again(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    give_back(shop, held_after_a_call(shop, lost=False), lost=False)
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        assert shop.deliver(event) == "held"
    assert shop.field("hold_reason").startswith(f"refunded in full {MAY_HAVE_APPLIED}: check")
    verdict = shop.attempts.record_decision(shop.pk, "not_applied", ("held",), "ops:alice")
    assert verdict == ("ok", "refunded_unfulfilled")


def test_a_failure_a_charge_figure_may_still_count_leaves_it_said_taken_back(
    redis, redis_server, rng
) -> None:
    """The same second as the charge event: the ledger still takes it back (a retry is
    skipped, not applied is taken), so its reason stays."""
    shop = Shop(redis_server, rng)
    taken = held_after_a_call(shop, lost=False)
    before = shop.field("hold_reason")
    assert shop.deliver(dated(refund_failed(rng, taken[0]), T)) == "held"
    assert shop.field("hold_reason") == before
    verdict = shop.attempts.record_decision(shop.pk, "not_applied", ("held",), "ops:alice")
    assert verdict == ("ok", "held")  # held to grant by hand: Stripe may have given it back
