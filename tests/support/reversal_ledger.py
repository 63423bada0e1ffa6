"""A ledger that holds one of everything a refund or a dispute leaves (the ``taken``
fixture): the real scripts, the real job in this process and the built-in SQLite downstream
for both actions brought each payment there (docs/REVERSAL.md)."""

import random
from typing import Any

import msgspec
import pytest

from ledger import keys
from ledger.attempts import Attempts
from ledgerctl import samples
from tests.support.helpers import payment_key_of, settled_as
from tests.support.refunds import dispute_closed, refund_events


class Taken(msgspec.Struct):
    """Payment keys of the seeded ledger, by what happened to each."""

    reversed: str
    partial: str
    reinstated: str
    unfulfilled: str
    interrupted: str
    amounts: dict[str, int]


def paid(f: Any, rng: random.Random) -> tuple[str, int]:
    event = samples.payment_events(rng)[2]
    f.deliver(event)
    return payment_key_of(event), int(event["data"]["object"]["amount_received"])


@pytest.fixture
def taken(fulfilment: Any, redis: Any, config: dict[str, object], rng: random.Random) -> Taken:
    """Reversed after a full refund; fulfilled with a partial refund; reversed for a lost
    dispute, then won (held); refunded before its fulfilment; a reversal interrupted."""
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"])
    (r, r_amount), (p, p_amount), (d, d_amount) = (paid(f, rng) for _ in range(3))
    f.work()
    for event in refund_events(rng, r, r_amount, r_amount):
        f.deliver(event)
    for event in refund_events(rng, p, p_amount, p_amount // 4):
        f.deliver(event)
    f.deliver(dispute_closed(rng, d, d_amount, "lost"))
    f.work()
    assert settled_as(redis, r, "reversed") and settled_as(redis, d, "reversed")
    f.deliver(dispute_closed(rng, d, d_amount, "won"))
    u, u_amount = paid(f, rng)
    for event in refund_events(rng, u, u_amount, u_amount):
        f.deliver(event)
    i, i_amount = paid(f, rng)
    f.work()
    for event in refund_events(rng, i, i_amount, i_amount):
        f.deliver(event)
    attempts = Attempts(redis, f.settings)  # a reversal call whose worker died
    start = attempts.start(i, "job-reversal", replay_safe=False, leg="reverse")
    assert start.verdict == "go" and attempts.mark_calling(i, start.token)
    redis.hset(keys.payment(i), "lease_until", 0)
    assert attempts.recover(i) == "interrupted"
    amounts = {r: r_amount, p: p_amount, d: d_amount, u: u_amount, i: i_amount}
    return Taken(r, p, d, u, i, amounts)


class TakenAgain(msgspec.Struct):
    """Payment keys of the ledger with REVERSAL_PER_REFUND and REVERSAL_DISPUTE_WON=fulfil."""

    per_refund: str
    refunds: dict[str, int]
    """The per-refund payment's refunds: id -> amount, each reversed on its own."""
    refulfilled: str
    amounts: dict[str, int]


@pytest.fixture
def taken_again(
    fulfilment: Any, redis: Any, config: dict[str, object], rng: random.Random
) -> TakenAgain:
    """Two partial refunds reversed one by one, the payment still fulfilled; a dispute lost,
    reversed, then won and fulfilled again."""
    f = fulfilment(
        REVERSAL_ACTION=config["FULFILMENT_ACTION"],
        REVERSAL_PER_REFUND="true",
        REVERSAL_DISPUTE_WON="fulfil",
    )
    (p, p_amount), (d, d_amount) = paid(f, rng), paid(f, rng)
    f.work()
    refunds = {}
    for part in (p_amount // 4, p_amount // 5):
        events = refund_events(rng, p, p_amount, part, refunded_before=sum(refunds.values()))
        refunds[events[0]["data"]["object"]["id"]] = part
        for event in events:
            f.deliver(event)
        f.work()
    f.deliver(dispute_closed(rng, d, d_amount, "lost"))
    f.work()
    assert settled_as(redis, d, "reversed")
    f.deliver(dispute_closed(rng, d, d_amount, "won"))
    f.work()
    assert settled_as(redis, p, "fulfilled") and settled_as(redis, d, "fulfilled")
    return TakenAgain(p, refunds, d, {p: p_amount, d: d_amount})
