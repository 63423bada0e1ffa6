"""A payment with more than one dispute (an inquiry closed, then a chargeback): a close of
one dispute never gives back what another took, in whatever order Stripe tells them."""

from typing import Any

import pytest

from ledger import keys
from tests.integration.test_reversal_shown import api, object_id
from tests.support.helpers import settled_as
from tests.support.refunds import dispute_event
from tests.support.reversal_ledger import paid

DAY = 86_400


def inquiry_then_chargeback(rng: Any, pk: str, amount: int) -> tuple[list[dict], dict, dict]:
    """An inquiry opened and closed (warning_closed), a chargeback opened a day later and
    lost a month after: its events in the order Stripe made them, the inquiry's close and
    the chargeback's loss."""
    inquiry = dispute_event(rng, pk, amount, "warning_needs_response", "charge.dispute.created")
    closed = dispute_event(
        rng, pk, amount, "warning_closed", "charge.dispute.closed", object_id(inquiry)
    )
    chargeback = dispute_event(rng, pk, amount, "needs_response", "charge.dispute.created")
    lost = dispute_event(rng, pk, amount, "lost", "charge.dispute.closed", object_id(chargeback))
    closed["created"] = inquiry["created"] + DAY
    chargeback["created"] = closed["created"] + DAY
    lost["created"] = chargeback["created"] + 30 * DAY
    return [inquiry, chargeback, lost], closed, lost


def fields(redis: Any, pk: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in redis.hgetall(keys.payment(pk)).items()}


@pytest.mark.parametrize("dispute_won", ["hold", "fulfil"])
def test_an_inquiry_s_close_told_after_the_chargeback_lost_gives_nothing_back(
    client, config, fulfilment, redis, rng, dispute_won
) -> None:
    """The inquiry's close comes after the chargeback's loss (a redelivery, reconcile's
    newest-first replay): the payment stays reversed, never held as a dispute won nor
    fulfilled again, and no dispute shows open (review s6 #1)."""
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"], REVERSAL_DISPUTE_WON=dispute_won)
    pk, amount = paid(f, rng)
    f.work()
    first, closed, lost = inquiry_then_chargeback(rng, pk, amount)
    for event in first:
        f.deliver(event)
    f.work()
    assert settled_as(redis, pk, "reversed")
    f.deliver(closed)
    f.work()
    now = fields(redis, pk)
    assert (now["state"], now["leg"], now.get("hold_reason")) == ("reversed", "reverse", None)
    assert now["dispute"] == f"{object_id(lost)} lost"
    shown = api(client, f"payments/{pk}")["reversal"]
    assert shown["open_dispute"] is None
    assert (shown["dispute"]["id"], shown["dispute"]["status"]) == (object_id(lost), "lost")


def test_a_chargeback_opened_after_its_inquiry_closed_shows_open_then_lost(
    client, config, fulfilment, redis, rng
) -> None:
    """In Stripe's order: the inquiry closed takes nothing back, the chargeback shows open
    until its loss, which takes the payment back."""
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"])
    pk, amount = paid(f, rng)
    f.work()
    (inquiry, chargeback, lost), closed, _ = inquiry_then_chargeback(rng, pk, amount)
    for event in (inquiry, closed, chargeback):
        f.deliver(event)
    f.work()
    assert settled_as(redis, pk, "fulfilled")
    shown = api(client, f"payments/{pk}")["reversal"]
    assert shown["open_dispute"] == "charge.dispute.created"
    f.deliver(lost)
    f.work()
    assert settled_as(redis, pk, "reversed")
    assert api(client, f"payments/{pk}")["reversal"]["open_dispute"] is None


def test_a_lost_dispute_is_given_back_only_by_a_win_of_its_own_id(
    config, fulfilment, redis, rng
) -> None:
    """Another dispute of the charge won gives nothing back; the lost one's own win does
    (held for a person to grant it again, REVERSAL_DISPUTE_WON's default)."""
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"])
    pk, amount = paid(f, rng)
    f.work()
    first, _, lost = inquiry_then_chargeback(rng, pk, amount)
    for event in first:
        f.deliver(event)
    f.work()
    other_won = dispute_event(rng, pk, amount, "won", "charge.dispute.closed")
    f.deliver(other_won)
    f.work()
    assert settled_as(redis, pk, "reversed")
    won = dispute_event(rng, pk, amount, "won", "charge.dispute.closed", object_id(lost))
    won["created"] = lost["created"] + DAY
    f.deliver(won)
    f.work()
    assert settled_as(redis, pk, "held")
    assert "dispute won" in fields(redis, pk)["hold_reason"]


def test_a_dispute_kept_before_the_closes_were_kept_by_id_still_decides(
    config, fulfilment, redis, rng
) -> None:
    """A payment whose lost dispute was kept as ``dispute`` alone (before ``disputes``): a
    close of another dispute leaves it lost, its own win gives it back."""
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"])
    pk, amount = paid(f, rng)
    f.work()
    _, _, lost = inquiry_then_chargeback(rng, pk, amount)
    f.deliver(lost)
    f.work()
    assert settled_as(redis, pk, "reversed")
    redis.hdel(keys.payment(pk), "disputes")  # as a ledger before this change kept it
    f.deliver(dispute_event(rng, pk, amount, "warning_closed", "charge.dispute.closed"))
    f.work()
    assert settled_as(redis, pk, "reversed")
    assert fields(redis, pk)["dispute"] == f"{object_id(lost)} lost"
    won = dispute_event(rng, pk, amount, "won", "charge.dispute.closed", object_id(lost))
    f.deliver(won)
    f.work()
    assert settled_as(redis, pk, "held")
