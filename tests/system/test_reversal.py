"""Refunds and disputes with real gunicorn, real RQ workers and a real sweeper: a reversal
once per payment after its effect, never a fulfilment after a refund (docs/REVERSAL.md)."""

import itertools
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time

import psycopg
import pytest

from ledger import keys
from ledger.gate import Gate
from ledger.settings import load
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import after_sweeps, settled_as, state_of
from tests.support.postgres import ORDER_SQL, make_shop
from tests.support.processes import wait_until
from tests.support.refunds import dispute_closed, refund_events
from tests.support.stack import Stack
from tests.support.stripe_api import API_KEY, EventsApi

SLOW = {"FULFILMENT_TIMEOUT": "5", "LEASE_SECONDS": "12"}


def paid(s: Stack, rng: random.Random) -> tuple[str, int]:
    """One card payment's events sent: its key and amount."""
    events = samples.payment_events(rng)
    for event in events:
        assert s.send(samples.encode(event)).status_code == 200
    obj = events[2]["data"]["object"]
    return str(obj["id"]), int(obj["amount_received"])


def send_all(s: Stack, events: list[dict]) -> None:
    for event in events:
        assert s.send(samples.encode(event)).status_code == 200


def test_a_full_refund_in_every_order_three_times_is_reversed_once(stack, redis, rng) -> None:
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        s = stack(FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=reverse.url)
        s.start_service()
        bought = [paid(s, rng) for _ in itertools.permutations(range(3))]
        wait_until(lambda: all(settled_as(redis, pk, "fulfilled") for pk, _ in bought))
        for (pk, amount), order in zip(bought, itertools.permutations(range(3)), strict=True):
            events = refund_events(rng, pk, amount, amount)
            send_all(s, [events[i] for i in order for _ in range(3)])
        wait_until(lambda: all(settled_as(redis, pk, "reversed") for pk, _ in bought))
        after_sweeps(redis)
        for pk, amount in bought:
            assert (fulfil.calls[pk], reverse.calls[pk]) == (1, 1)
            body = next(b for b in reverse.bodies if b["payment_key"] == pk)
            assert body["idempotency_key"] == f"reverse:{pk}"
            assert body["reversal"]["why"] == "refund"
            assert body["reversal"]["refunded_amount"] == amount
        assert set(reverse.idempotency_keys) == {f"reverse:{pk}" for pk, _ in bought}
        assert redis.hget(keys.PAYMENT_STATE_COUNTS, "reversed") == b"6"


def test_paid_and_refunded_while_paused_is_never_called(stack, redis, config, rng) -> None:
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        s = stack(FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=reverse.url)
        gate = Gate(redis, load({}, **{k: str(v) for k, v in config.items()}))
        gate.pause("test", "refund while paused")
        s.start_service()
        pk, amount = paid(s, rng)
        wait_until(lambda: redis.zscore(keys.waiting("paused"), pk) is not None, what="waiting")
        send_all(s, refund_events(rng, pk, amount, amount))
        gate.resume("test")
        after_sweeps(redis, 3)
        assert settled_as(redis, pk, "refunded_unfulfilled")
        assert (fulfil.calls[pk], reverse.calls[pk]) == (0, 0)


def test_a_refund_during_a_slow_fulfilment_call_is_reversed_after_it(stack, redis, rng) -> None:
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        held = fulfil.hold_first_call()
        # The call is held until the test lets it go: its deadline must not end it first.
        roomy = {"FULFILMENT_TIMEOUT": "30", "LEASE_SECONDS": "35"}
        s = stack(FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=reverse.url, **roomy)
        s.start_service()
        pk, amount = paid(s, rng)
        wait_until(lambda: fulfil.in_flight[pk] == 1, what="the fulfilment call in flight")
        send_all(s, refund_events(rng, pk, amount, amount))
        assert state_of(redis, pk) == "in_progress"
        held.set()
        wait_until(lambda: settled_as(redis, pk, "reversed"))
        assert (fulfil.calls[pk], reverse.calls[pk]) == (1, 1)
        first, second = fulfil.answered[0], reverse.answered[0]
        assert first[0] <= second[0]  # the reversal came after the fulfilment's call


def test_a_partial_refund_reverses_nothing(stack, redis, rng) -> None:
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        s = stack(FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=reverse.url)
        s.start_service()
        pk, amount = paid(s, rng)
        wait_until(lambda: settled_as(redis, pk, "fulfilled"))
        send_all(s, refund_events(rng, pk, amount, amount // 2) * 2)
        after_sweeps(redis, 3)
        assert settled_as(redis, pk, "fulfilled") and reverse.calls[pk] == 0
        assert redis.hget(keys.payment(pk), "taken_back") is None


def test_a_lost_dispute_marks_the_sqlite_order_reversed_once(stack, redis, config, rng) -> None:
    """The built-in SQLite downstream for both: the order row marked reversed in the
    transaction that records the reversal's key."""
    s = stack(REVERSAL_ACTION=str(config["FULFILMENT_ACTION"]))
    s.start_service()
    pk, amount = paid(s, rng)
    wait_until(lambda: settled_as(redis, pk, "fulfilled"))
    lost = dispute_closed(rng, pk, amount, "lost")
    send_all(s, [lost, lost])
    wait_until(lambda: settled_as(redis, pk, "reversed"))
    db = sqlite3.connect(str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))
    orders = db.execute("SELECT idempotency_key, reversed_at FROM orders").fetchall()
    assert len(orders) == 1 and orders[0][0] == f"fulfil:{pk}" and orders[0][1] is not None
    reversals = db.execute("SELECT idempotency_key, reversal FROM reversals").fetchall()
    assert [key for key, _ in reversals] == [f"reverse:{pk}"]
    assert '"why": "dispute"' in reversals[0][1]
    calls = db.execute("SELECT outcome FROM reversal_calls").fetchall()
    assert calls == [("applied",)]


@pytest.mark.parametrize("replay_safe", [True, False])
def test_a_worker_killed_during_its_reversal_call(stack, redis, config, rng, replay_safe) -> None:
    """Replay-safe (the built-in SQLite downstream): run again, one reversal. Not (an HTTP
    downstream that never dedupes): interrupted, for a person, never called again."""
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        target = str(config["FULFILMENT_ACTION"]) if replay_safe else reverse.url
        s = stack(FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=target)
        s.start_web()
        first = s.start_worker()
        s.start_sweeper()
        pk, amount = paid(s, rng)
        wait_until(lambda: settled_as(redis, pk, "fulfilled"))
        first.stop()
        doomed = s.start_worker(FAULTPOINT="after_action")
        send_all(s, refund_events(rng, pk, amount, amount))
        assert doomed.proc is not None and doomed.proc.wait(20) == -signal.SIGKILL
        s.start_worker()
        if replay_safe:
            wait_until(lambda: settled_as(redis, pk, "reversed"))
            db = sqlite3.connect(target.removeprefix("sqlite:///"))
            calls = db.execute("SELECT outcome FROM reversal_calls").fetchall()
            assert calls == [("applied",), ("already_applied",)]
            assert db.execute("SELECT COUNT(*) FROM reversals").fetchone() == (1,)
        else:
            wait_until(lambda: settled_as(redis, pk, "interrupted"))
            after_sweeps(redis)
            assert redis.hget(keys.payment(pk), "leg") == b"reverse"
            assert (redis.hget(keys.payment(pk), "last_error") or b"").startswith(b"reversal: ")
            assert reverse.calls[pk] == 1
        assert fulfil.calls[pk] == 1


def test_two_partial_refunds_are_each_reversed_once_with_their_amounts(stack, redis, rng) -> None:
    """REVERSAL_PER_REFUND: the first refund's events in order, twice, reversed while the
    payment stays fulfilled; the second's in reverse order (``charge.refunded`` listing both
    before ``refund.created``), three times: two calls, each once, with its amount and key."""
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        s = stack(
            FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=reverse.url, REVERSAL_PER_REFUND="true"
        )
        s.start_service()
        pk, amount = paid(s, rng)
        wait_until(lambda: settled_as(redis, pk, "fulfilled"))
        part = amount // 3
        first = refund_events(rng, pk, amount, part)
        rest = refund_events(rng, pk, amount, amount - part, refunded_before=part)
        rest[1]["data"]["object"]["refunds"]["data"].insert(0, first[2]["data"]["object"])
        send_all(s, first * 2)
        wait_until(lambda: reverse.calls[pk] == 1 and settled_as(redis, pk, "fulfilled"))
        send_all(s, rest[::-1] * 3)
        wait_until(lambda: settled_as(redis, pk, "reversed"))
        after_sweeps(redis)
        ids = [events[0]["data"]["object"]["id"] for events in (first, rest)]
        sent = sorted(
            (b["idempotency_key"], b["reversal"]["refund_id"], b["reversal"]["amount"])
            for b in reverse.bodies
        )
        assert sent == sorted(
            (f"reverse:{pk}:{rid}", rid, n)
            for rid, n in zip(ids, (part, amount - part), strict=True)
        )
        assert (fulfil.calls[pk], reverse.calls[pk]) == (1, 2)
        assert redis.hget(keys.payment(pk), "reversed_amount") == str(amount).encode()


def test_a_dispute_lost_then_won_is_fulfilled_again_once(stack, redis, rng) -> None:
    """REVERSAL_DISPUTE_WON=fulfil: reversed once for the lost dispute, then fulfilled again
    once under its own key when it is won (each closing event twice)."""
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        s = stack(
            FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=reverse.url, REVERSAL_DISPUTE_WON="fulfil"
        )
        s.start_service()
        pk, amount = paid(s, rng)
        wait_until(lambda: settled_as(redis, pk, "fulfilled"))
        lost = dispute_closed(rng, pk, amount, "lost")
        send_all(s, [lost, lost])
        wait_until(lambda: settled_as(redis, pk, "reversed"))
        won = dispute_closed(rng, pk, amount, "won")
        send_all(s, [won, won])
        wait_until(lambda: fulfil.calls[pk] == 2 and settled_as(redis, pk, "fulfilled"))
        after_sweeps(redis)
        assert (fulfil.calls[pk], reverse.calls[pk]) == (2, 1)
        assert sorted(fulfil.idempotency_keys) == [f"fulfil:{pk}", f"refulfil:{pk}"]
        stats = redis.hgetall(keys.STATS)
        assert (stats[b"reinstated"], stats[b"refulfilled"]) == (b"1", b"1")


REVERSED_SQL = (
    "UPDATE shop_orders SET reversed = reversed + %(reversal_amount)s"
    " WHERE payment_key = %(payment_key)s RETURNING reversed"
)


def test_postgresql_marks_the_order_reversed_with_the_key_or_neither(
    stack, redis, rng, postgres_url
) -> None:
    """REVERSAL_SQL in the reversal's transaction: the worker is killed while its statement
    waits on a row another session holds (the key inserted, not committed): neither the key
    nor the mark remains; the re-run after its lease marks the order once, with its key."""
    make_shop(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE shop_orders ADD COLUMN reversed bigint NOT NULL DEFAULT 0")
    s = stack(
        FULFILMENT_ACTION=postgres_url,
        FULFILMENT_SQL=ORDER_SQL,
        REVERSAL_ACTION=postgres_url,
        REVERSAL_SQL=REVERSED_SQL,
        **SLOW,
    )
    s.start_web()
    s.start_sweeper()
    worker = s.start_worker()
    pk, amount = paid(s, rng)
    wait_until(lambda: settled_as(redis, pk, "fulfilled"))
    holder = psycopg.connect(postgres_url)
    holder.execute("SELECT * FROM shop_orders WHERE payment_key = %s FOR UPDATE", (pk,))
    try:
        send_all(s, refund_events(rng, pk, amount, amount))

        def waiting() -> bool:
            with psycopg.connect(postgres_url) as conn:
                found = conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                return found.fetchone() == (1,)

        wait_until(waiting, what="the reversal's statement waiting on the order row")
        worker.signal(signal.SIGKILL)
        assert worker.proc is not None and worker.proc.wait(20) == -signal.SIGKILL
    finally:
        holder.rollback()
        holder.close()

    def marked() -> tuple[object, ...]:
        with psycopg.connect(postgres_url) as conn:
            keys_ = conn.execute(
                "SELECT count(*) FROM webhook_ledger_effects WHERE idempotency_key = %s",
                (f"reverse:{pk}",),
            ).fetchone()
            reversed_ = conn.execute("SELECT reversed FROM shop_orders").fetchall()
        return (keys_, reversed_)

    wait_until(lambda: not waiting(), what="the killed worker's transaction ended")
    assert marked() == ((0,), [(0,)])  # neither the key nor the mark
    s.start_worker()
    wait_until(lambda: settled_as(redis, pk, "reversed"), timeout=60)
    assert marked() == ((1,), [(amount,)])


def test_a_reversal_after_fulfilment_action_moved_waits_for_a_person(
    stack, redis, rng, postgres_url
) -> None:
    """Fulfilled into PostgreSQL; the workers restarted with both actions on an HTTP app
    (docs/ACTIONS.md: "move by changing the URL"); a refund in full. The app is never called,
    the order row is untouched and the payment is held, its reason naming both downstreams
    (never the password); the person takes it back in PostgreSQL and resolves it: reversed."""
    make_shop(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE shop_orders ADD COLUMN reversed bigint NOT NULL DEFAULT 0")
    effects = {"FULFILMENT_SQL": ORDER_SQL, "REVERSAL_SQL": REVERSED_SQL}
    s = stack(FULFILMENT_ACTION=postgres_url, REVERSAL_ACTION=postgres_url, **effects)
    s.start_web()
    s.start_sweeper()
    first = s.start_worker()
    pk, amount = paid(s, rng)
    wait_until(lambda: settled_as(redis, pk, "fulfilled"))
    first.stop()
    with CountingDownstream() as app:
        for name in effects:
            del s.env[name]
        s.start_worker(FULFILMENT_ACTION=app.url, REVERSAL_ACTION=app.url)
        send_all(s, refund_events(rng, pk, amount, amount))
        wait_until(lambda: settled_as(redis, pk, "held"))
        after_sweeps(redis)
        assert app.calls[pk] == 0 and state_of(redis, pk) == "held"
        with psycopg.connect(postgres_url) as conn:
            assert conn.execute("SELECT reversed FROM shop_orders").fetchall() == [(0,)]
            kept = conn.execute("SELECT idempotency_key FROM webhook_ledger_effects").fetchall()
            assert kept == [(f"fulfil:{pk}",)]

        def cli(*args: str) -> str:
            argv = [sys.executable, "-m", "ledgerctl.cli", *args]
            run = subprocess.run(argv, env=s.env, capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, run.stderr
            return run.stdout

        reason = json.loads(cli("payment", pk, "--json"))["hold_reason"]
        assert reason.startswith("reversal: not called: its fulfilment went to postgresql:")
        assert "FULFILMENT_ACTION names http:" in reason and "resolve it as fulfilled" in reason
        assert "shop-pw" not in reason and "/fulfil" not in reason
        with psycopg.connect(postgres_url, autocommit=True) as conn:  # taken back by hand
            conn.execute("UPDATE shop_orders SET reversed = amount")
        cli("resolve", pk, "--fulfilled")
        assert settled_as(redis, pk, "reversed") and app.calls[pk] == 0


def test_refunds_and_disputes_stripe_gave_up_delivering_are_reversed_by_reconcile(
    stack, redis, rng
) -> None:
    """Reconcile lists every type from the Events API (no type filter): a full refund's
    events and a lost dispute never delivered are recorded through it (source api) and each
    payment is reversed once, the run reporting both types."""
    api = EventsApi().start()
    try:
        with CountingDownstream() as fulfil, CountingDownstream() as reverse:
            s = stack(
                FULFILMENT_ACTION=fulfil.url,
                REVERSAL_ACTION=reverse.url,
                STRIPE_API_KEY=API_KEY,
                STRIPE_API_BASE=api.url,
            )
            s.start_service()
            (refunded, amount), (disputed, other) = paid(s, rng), paid(s, rng)
            wait_until(lambda: settled_as(redis, refunded, "fulfilled"))
            wait_until(lambda: settled_as(redis, disputed, "fulfilled"))
            taken = refund_events(rng, refunded, amount, amount)
            for event in [*taken, dispute_closed(rng, disputed, other, "lost")]:
                api.add({**event, "created": int(time.time()) - 3600})  # within the window
            run = subprocess.run(
                [sys.executable, "-m", "ledgerctl.cli", "reconcile", "--apply", "--json"],
                env=s.env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert run.returncode == 0, run.stderr
            report = json.loads(run.stdout)
            assert report["by_type"] == {
                "refund.created": 1,
                "charge.refunded": 1,
                "refund.updated": 1,
                "charge.dispute.closed": 1,
            }
            for pk in (refunded, disputed):
                wait_until(lambda pk=pk: settled_as(redis, pk, "reversed"))
            after_sweeps(redis)
            assert [reverse.calls[pk] for pk in (refunded, disputed)] == [1, 1]
    finally:
        api.stop()
