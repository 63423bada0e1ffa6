"""The ways into and out of a settlement that the rule's own tests (test_settlement.py) do
not walk: an attempt that makes no call (its worker cannot load its action) between a call
that may have applied and the refund, a settlement such an attempt gives up, and how the
payment and its attempts are shown while it is settled (docs/REVERSAL.md, "When a payment
is taken back")."""

import random
import sqlite3
from typing import Any

import pytest

from ledger import keys
from ledger.purchase import purchase_of, stored_fields
from ledger.stored import text
from ledgerctl import samples
from tests.integration.test_lua_reversal import Shop
from tests.support.constants import BASIC
from tests.support.helpers import run_cli, settled_as
from tests.support.refunds import refund_events
from workers.sqlite_action import SqliteAction

UNLOADABLE = "foo_not_a_module:fulfil"
"""A FULFILMENT_ACTION a worker cannot load: each job it runs fails without a call."""


def built_in_actions(config: dict[str, object]) -> dict[str, object]:
    """The test's built-in SQLite downstream for both actions: a worker that can load them."""
    return {
        "FULFILMENT_ACTION": config["FULFILMENT_ACTION"],
        "REVERSAL_ACTION": config["FULFILMENT_ACTION"],
    }


def paid_then_called(f: Any, redis: Any, config: dict[str, object], rng: random.Random) -> str:
    """A payment whose first attempt, by the built-in SQLite action, applied and got no answer
    (retried); returns its key."""
    paid = samples.payment_events(rng)[2]
    pk = str(paid["data"]["object"]["id"])
    f.deliver(paid)
    redis.delete("rq:queue:fulfilment")  # its worker took the job
    start = f.attempts.start(pk, "job-1", True, settles=True)
    action = SqliteAction(str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))
    action(purchase_of(pk, start.token, stored_fields(redis, pk)))  # it applied
    f.attempts.finish(pk, start.token, "retry", "no answer", 1.0)
    return pk


def due_now(redis: Any, pk: str) -> None:
    """Its retry's backoff over (the sweeper's next pass finds it due)."""
    redis.hset(keys.payment(pk), "next_at", 0)
    redis.zadd(keys.DUE, {pk: 0})


def refunded_in_full(f: Any, redis: Any, rng: random.Random, pk: str) -> None:
    amount = int(text(redis.hget(keys.payment(pk), "amount")))
    for event in refund_events(rng, pk, amount, amount):
        f.deliver(event)


def orders_of(config: dict[str, object]) -> tuple[int, int]:
    """The SQLite downstream's orders, and of them those reversed."""
    db = sqlite3.connect(str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))
    found = db.execute("SELECT count(*), count(reversed_at) FROM orders").fetchone()
    db.close()
    return found


def test_an_attempt_that_could_not_load_its_action_does_not_hide_an_earlier_call_from_a_refund(
    fulfilment: Any, redis: Any, config: dict[str, object], rng: random.Random
) -> None:
    """A worker deployed with an action it cannot load runs the retry: an attempt without a
    call, which says nothing of the call before it. Refunded in full then, the payment is
    settled (the order found, then reversed), never refunded_unfulfilled with its order in
    the downstream."""
    good = built_in_actions(config)
    f = fulfilment(**good)
    pk = paid_then_called(f, redis, config, rng)
    due_now(redis, pk)
    broken = fulfilment(FULFILMENT_ACTION=UNLOADABLE)
    broken.sweep()
    broken.work()
    assert settled_as(redis, pk, "failed")
    refunded_in_full(broken, redis, rng, pk)
    assert text(redis.hget(keys.payment(pk), "state")) != "refunded_unfulfilled"
    f = fulfilment(**good)
    for _ in range(3):
        f.sweep()
        f.work()
    assert settled_as(redis, pk, "reversed")
    assert orders_of(config) == (1, 1)


def test_a_settlement_its_worker_could_not_run_is_settled_by_a_persons_retry(
    fulfilment: Any, redis: Any, config: dict[str, object], rng: random.Random
) -> None:
    """The settlement's job run by a worker that cannot load its action: given up, held for a
    person. Once the setting is fixed, a person's retry settles it (docs/REVERSAL.md), the
    attempt that made no call having changed nothing of what the call before it said."""
    good = built_in_actions(config)
    f = fulfilment(**good)
    pk = paid_then_called(f, redis, config, rng)
    refunded_in_full(f, redis, rng, pk)
    assert text(redis.hget(keys.payment(pk), "leg")) == "settle"
    broken = fulfilment(FULFILMENT_ACTION=UNLOADABLE)
    broken.work()
    assert settled_as(redis, pk, "held")
    assert "could not settle" in text(redis.hget(keys.payment(pk), "hold_reason"))
    f = fulfilment(**good)
    assert f.attempts.record_decision(pk, "retry", ("held",), "person")[0] == "ok"
    for _ in range(3):
        f.work()
        f.sweep()
    assert settled_as(redis, pk, "reversed")
    assert orders_of(config) == (1, 1)


def test_a_settlement_is_shown_as_one_on_the_dashboard_and_the_cli(
    fulfilment: Any, redis: Any, config: dict[str, object], rng: random.Random, client: Any
) -> None:
    """A payment whose settlement is due is listed as being settled (not as a fulfilment
    again), its settlement's attempt is one, and a payment it voided is said to need no
    reversal because its key was voided (not "never called": it was)."""
    f = fulfilment()
    voided = paid_then_called(f, redis, config, rng)
    db = sqlite3.connect(str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))
    db.execute("DELETE FROM orders")  # this one's call applied nothing after all
    db.commit()
    db.close()
    refunded_in_full(f, redis, rng, voided)
    f.work()
    assert settled_as(redis, voided, "refunded_unfulfilled")
    due = paid_then_called(f, redis, config, rng)
    refunded_in_full(f, redis, rng, due)
    assert text(redis.hget(keys.payment(due), "leg")) == "settle"

    listed = client.get("/ops/payments?state=queued", headers=BASIC).get_data(as_text=True)
    assert due in listed and "fulfilment again" not in listed
    assert '<span class="muted">settlement</span>' in listed
    page = client.get(f"/ops/payments/{voided}", headers=BASIC).get_data(as_text=True)
    assert '<td data-label="of">settlement</td>' in page
    assert 'id="settled-voided"' in page and "never called" not in page
    shown = run_cli(config, "payment", voided).stdout
    assert "voided its key" in shown and "never called" not in shown
    assert "settlement" in shown  # its attempt's leg


@pytest.mark.parametrize("settles", [True, False])
def test_a_refund_during_the_budgets_last_attempt_is_settled_once_its_lease_expires(
    redis: Any, redis_server: Any, rng: random.Random, settles: bool
) -> None:
    """Refunded in full while the last attempt of its budget runs, then its worker dies: the
    attempt is over when the sweeper ends its lease, and the refund then does what it does
    to a payment whose call may have applied (settled, or held for a person), as when the
    worker answers (finish_attempt.lua); not failed as a dead letter."""
    shop = Shop(redis_server, rng, True, MAX_ATTEMPTS="1")
    shop.deliver(shop.paid)
    shop.attempts.start(shop.pk, "job-1", True, settles=settles)
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        shop.deliver(event)
    assert shop.state() == "in_progress"  # nothing until the attempt ends
    redis.hset(keys.payment(shop.pk), "lease_until", 0)  # its worker died
    verdict = shop.attempts.recover(shop.pk)
    if settles:
        assert (verdict, shop.state(), shop.field("leg")) == ("requeued", "queued", "settle")
        assert shop.field("job") and redis.zscore(keys.DUE, shop.pk) is not None
    else:
        assert (verdict, shop.state()) == ("spent", "held")
        assert "may have applied" in shop.field("hold_reason")
