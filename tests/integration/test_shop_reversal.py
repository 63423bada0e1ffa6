"""examples/shop's revoke.sql through the real ledger, the real job in this process and a
real PostgreSQL, with and without REVERSAL_PER_REFUND: an entitlement is all or nothing, so a
partial refund leaves it granted, refunds adding up to what was paid revoke it once, and a
dispute lost revokes it; so do refunds reversed one by one before the amount paid was known
(a thin event paid it), once it comes, or while the last one's call runs; every event
delivered twice."""

import random
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from examples.shop import migrate
from ledger import keys
from ledgerctl import samples
from tests.integration.test_thin_events import payment_intent, thin_event
from tests.support.helpers import settled_as
from tests.support.postgres import shop_actions
from tests.support.processes import ROOT
from tests.support.refunds import dispute_closed, refund_events
from tests.support.reversal_ledger import paid
from workers.effects import sql_params

GRANT = f"@{ROOT / 'examples' / 'shop' / 'grant.sql'}"
REVOKE = f"@{ROOT / 'examples' / 'shop' / 'revoke.sql'}"


def entitlement(url: str, pk: str) -> tuple[int, bool]:
    """The payment's one entitlement: what its reversals took, and whether it is revoked."""
    with psycopg.connect(url) as conn:
        sql = "SELECT reversed_amount, revoked_at FROM entitlements WHERE payment_key = %s"
        [(taken, revoked_at)] = conn.execute(sql, (pk,)).fetchall()
    return taken, revoked_at is not None


def reversal_keys(url: str, pk: str) -> list[str]:
    with psycopg.connect(url) as conn:
        sql = "SELECT idempotency_key FROM webhook_ledger_effects WHERE payment_key = %s"
        return sorted(row[0] for row in conn.execute(sql, (pk,)) if row[0].startswith("reverse:"))


@pytest.mark.parametrize("per_refund", [False, True])
def test_revoke_sql_revokes_only_what_is_taken_back_in_full(
    fulfilment, redis, postgres_url, rng: random.Random, per_refund: bool
) -> None:
    migrate(postgres_url)
    f = fulfilment(
        **shop_actions(postgres_url),
        REVERSAL_PER_REFUND=str(per_refund).lower(),
        FULFILMENT_TIMEOUT="3",
        LEASE_SECONDS="6",
    )
    (part, part_paid), (two, two_paid), (lost, lost_paid) = (paid(f, rng) for _ in range(3))
    f.work()
    for event in refund_events(rng, part, part_paid, part_paid // 4) * 2:
        f.deliver(event)
    first = two_paid // 3
    for event in refund_events(rng, two, two_paid, first) * 2:
        f.deliver(event)
    f.deliver(dispute_closed(rng, lost, lost_paid, "lost"))
    f.work()
    assert entitlement(postgres_url, part) == ((part_paid // 4) if per_refund else 0, False)
    assert entitlement(postgres_url, two) == ((first if per_refund else 0), False)
    assert entitlement(postgres_url, lost) == (lost_paid, True)
    assert settled_as(redis, part, "fulfilled") and settled_as(redis, two, "fulfilled")

    rest = refund_events(rng, two, two_paid, two_paid - first, refunded_before=first)
    for event in rest * 2:
        f.deliver(event)
    f.work()
    assert settled_as(redis, two, "reversed") and settled_as(redis, lost, "reversed")
    assert entitlement(postgres_url, two) == (two_paid, True)
    assert entitlement(postgres_url, part)[1] is False
    assert len(reversal_keys(postgres_url, two)) == (2 if per_refund else 1)
    assert reversal_keys(postgres_url, lost) == [f"reverse:{lost}"]


THIN = "v1.payment_intent.succeeded"


def thin_paid_refunded_twice(
    fulfilment: Any, postgres_url: str, rng: random.Random, **revoke: str
) -> tuple[Any, dict[str, Any], list[list[dict[str, Any]]]]:
    """The shop on PostgreSQL with REVERSAL_PER_REFUND and ``revoke`` (its reversal's effect):
    a payment only its thin event paid, fulfilled (the amount paid not known); its snapshot
    paid event, not delivered yet; and the events of two refunds, a third then the rest,
    not delivered yet."""
    migrate(postgres_url)
    f = fulfilment(
        FULFILMENT_ACTION=postgres_url,
        FULFILMENT_SQL=GRANT,
        REVERSAL_ACTION=postgres_url,
        REVERSAL_PER_REFUND="true",
        PAID_EVENT_TYPES=f"payment_intent.succeeded,{THIN}",
        FULFILMENT_TIMEOUT="3",
        LEASE_SECONDS="6",
        **revoke,
    )
    snapshot = samples.payment_events(rng)[2]
    pk, paid = snapshot["data"]["object"]["id"], snapshot["data"]["object"]["amount_received"]
    f.deliver(thin_event(rng, THIN, payment_intent(pk)))
    f.work()
    first = paid // 3
    refunds = [
        refund_events(rng, pk, paid, first),
        refund_events(rng, pk, paid, paid - first, refunded_before=first),
    ]
    return f, snapshot, refunds


def test_revoke_sql_revokes_refunds_reversed_before_the_amount_paid_was_known(
    fulfilment, redis, postgres_url, rng: random.Random
) -> None:
    """Paid only by its thin event (no amount: the entitlement's is NULL), fulfilled, then
    refunded in full in two refunds, each reversed on its own while the amount paid was not
    known: neither reversal's call carries it, so revoke.sql cannot tell they reach it and
    the entitlement stays. The PaymentIntent's own paid event then gives the amount: the
    ledger reverses what remains, 0 with no refund id under ``reverse:{payment_key}``, and
    revoke.sql revokes at once. Without that reversal the payment was ``reversed`` with the
    entitlement still granted."""
    revoke = {"REVERSAL_SQL": REVOKE}
    f, snapshot, refunds = thin_paid_refunded_twice(fulfilment, postgres_url, rng, **revoke)
    pk, paid = snapshot["data"]["object"]["id"], snapshot["data"]["object"]["amount_received"]
    assert settled_as(redis, pk, "fulfilled")
    for events in refunds:
        for event in events * 2:
            f.deliver(event)
        f.work()
        assert settled_as(redis, pk, "fulfilled")
    assert redis.hget(keys.payment(pk), "amount") == b""
    assert entitlement(postgres_url, pk) == (paid, False)  # each refund's amount, added

    for _ in range(2):
        f.deliver(snapshot)
    f.work()
    assert settled_as(redis, pk, "reversed")
    assert entitlement(postgres_url, pk) == (paid, True)
    each = sorted(f"reverse:{pk}:{e[0]['data']['object']['id']}" for e in refunds)
    assert reversal_keys(postgres_url, pk) == sorted([f"reverse:{pk}", *each])


DURING_THE_CALL: list[Callable[[], object]] = []
"""What happens while the next reversal's effect runs: each called once, then dropped."""


def revoke_meanwhile(conn: Any, purchase: dict[str, Any]) -> dict[str, Any]:
    """A REVERSAL_EFFECT: examples/shop's revoke.sql, run once what DURING_THE_CALL holds has
    happened (an event recorded while the reversal's call is under way)."""
    while DURING_THE_CALL:
        DURING_THE_CALL.pop(0)()
    sql = (ROOT / "examples" / "shop" / "revoke.sql").read_text()
    row = conn.execute(sql, sql_params(purchase)).fetchone()
    return {"revoked": bool(row and row[2])}


def test_revoke_sql_revokes_when_the_amount_paid_comes_during_the_last_refunds_reversal(
    fulfilment, redis, postgres_url, rng: random.Random
) -> None:
    """Paid only by its thin event, fulfilled, its first refund reversed with the amount paid
    not known; the PaymentIntent's own paid event comes while the second refund's reversal
    (the rest) is in its call, which carries no amount paid: revoke.sql adds it and cannot
    tell it reaches what was paid. The ledger reverses what remains once more (0, no refund
    id) and revoke.sql revokes; without it the payment was ``reversed`` with the
    entitlement still granted."""
    effect = {"REVERSAL_EFFECT": f"{__name__}:revoke_meanwhile"}
    f, snapshot, refunds = thin_paid_refunded_twice(fulfilment, postgres_url, rng, **effect)
    pk, paid = snapshot["data"]["object"]["id"], snapshot["data"]["object"]["amount_received"]
    first = refunds[0][0]["data"]["object"]["amount"]
    for event in refunds[0] * 2:
        f.deliver(event)
    f.work()
    assert settled_as(redis, pk, "fulfilled") and entitlement(postgres_url, pk) == (first, False)

    DURING_THE_CALL.append(lambda: f.deliver(snapshot))
    for event in refunds[1] * 2:
        f.deliver(event)
    f.work()
    assert not DURING_THE_CALL and redis.hget(keys.payment(pk), "amount") == str(paid).encode()
    f.sweep()  # enqueues the reversal of what remains
    f.work()
    assert settled_as(redis, pk, "reversed")
    assert entitlement(postgres_url, pk) == (paid, True)
    each = sorted(f"reverse:{pk}:{e[0]['data']['object']['id']}" for e in refunds)
    assert reversal_keys(postgres_url, pk) == sorted([f"reverse:{pk}", *each])
