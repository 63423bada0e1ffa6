"""A payment refunded in full (or its dispute lost) after an attempt of a replay-safe action
that may have applied: the built-in SQLite and PostgreSQL actions settle it themselves (leg
``settle``: the key found, so the effect applied and is taken back as any fulfilled one's; or
voided, so no attempt can apply it after), where any other action leaves it held for a person
(docs/REVERSAL.md, "When a payment is taken back")."""

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ledger import keys
from ledger.downstream import open_downstream
from ledger.purchase import purchase_of, stored_fields
from ledger.stored import text
from ledgerctl import samples
from tests.integration.test_database_actions import call
from tests.integration.test_lua_reversal import Shop
from tests.integration.test_metrics_alerting import scrape
from tests.support.constants import BEARER
from tests.support.helpers import run_cli, settled_as
from tests.support.refunds import dispute_closed, refund_events
from workers import postgres_schema
from workers.actions import downstream_of
from workers.exceptions import PermanentDownstreamError
from workers.postgres_action import PostgresAction
from workers.sqlite_action import SqliteAction


def ambiguous_then_refunded(shop: Shop, settles: bool = True) -> int:
    """An attempt of a replay-safe action that ended with no answer (retried), then the
    payment refunded in full; returns the attempt's token."""
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", True, settles=settles)
    assert start.verdict == "go"
    assert shop.attempts.finish(shop.pk, start.token, "retry", "no answer", 1.0)[1] == "retrying"
    for event in refund_events(shop.rng, shop.pk, shop.amount, shop.amount):
        shop.deliver(event)
    return start.token


def settle(shop: Shop, outcome: str, detail: str = "{}") -> tuple[str, str]:
    start = shop.attempts.start(shop.pk, "job-settle", True, leg="settle", settles=True)
    assert start.verdict == "go", start
    return shop.attempts.finish(shop.pk, start.token, outcome, detail, 1.0)


@pytest.mark.parametrize("reverse", [False, True])
def test_a_settlement_that_voids_the_key_leaves_it_refunded_unfulfilled(
    redis, redis_server, rng, reverse
) -> None:
    shop = Shop(redis_server, rng, reverse)
    token = ambiguous_then_refunded(shop)
    assert (shop.state(), shop.field("leg"), shop.field("settle_from")) == (
        "queued",
        "settle",
        str(token),
    )
    assert redis.llen("rq:queue:fulfilment") == 2  # the paid event's job, the refund's
    assert shop.attempts.start(shop.pk, "old-job", True).reason == "leg"  # a fulfilment's
    assert settle(shop, "voided") == ("voided", "refunded_unfulfilled")
    assert shop.field("leg") == "" and shop.field("taken_back") == "refund"
    assert redis.hget(keys.STATS, "settled_voided") == b"1"
    assert shop.attempts.start(shop.pk, "late", True).reason == "refunded_unfulfilled"


@pytest.mark.parametrize("reverse", [False, True])
def test_a_settlement_that_finds_the_effect_fulfils_then_takes_it_back(
    redis, redis_server, rng, reverse
) -> None:
    shop = Shop(redis_server, rng, reverse)
    ambiguous_then_refunded(shop)
    verdict, state = settle(shop, "fulfilled", json.dumps({"outcome": "already_applied"}))
    assert verdict == "fulfilled"
    if reverse:  # its reversal due at once, as for any fulfilled payment refunded
        assert (state, shop.field("leg"), shop.field("reversal_why")) == (
            "queued",
            "reverse",
            "refund",
        )
        assert shop.attempt("reverse") == "reversed"
    else:
        assert (state, shop.field("leg"), shop.field("taken_back")) == ("fulfilled", "", "refund")
    assert redis.hget(keys.STATS, "settled_applied") == b"1"


def test_a_settlement_given_up_is_held_for_a_person_and_not_settled_again(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    ambiguous_then_refunded(shop)
    assert settle(shop, "failed", "settlement: no such table")[1] == "held"
    assert "could not settle it" in shop.field("hold_reason")
    assert (shop.field("leg"), shop.field("settle_gave_up")) == ("", "1")
    shop.deliver(dispute_closed(rng, shop.pk, shop.amount, "lost"))  # taken back again
    assert shop.state() == "held" and shop.field("leg") == ""
    assert "could not settle it" in shop.field("hold_reason")  # kept, not written over
    # its cause fixed, a person's retry settles it again (not a fulfilment: it is taken back)
    verdict, _ = shop.attempts.record_decision(shop.pk, "retry", ("held",), "person")
    assert verdict == "ok"
    assert shop.attempts.start(shop.pk, "job-2", True, settles=True).reason == "taken_back"
    assert (shop.state(), shop.field("leg")) == ("queued", "settle")
    assert settle(shop, "voided") == ("voided", "refunded_unfulfilled")


def test_a_settlement_spends_its_budget_on_retries_then_is_held(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    ambiguous_then_refunded(shop)
    for _ in range(shop.s.MAX_ATTEMPTS - 1):
        assert settle(shop, "retry", "settlement: database down")[1] == "retrying"
        shop.redis.hset(keys.payment(shop.pk), "next_at", 0)
    assert settle(shop, "retry", "settlement: database down")[1] == "held"


def test_an_action_that_cannot_settle_leaves_it_held(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    ambiguous_then_refunded(shop, settles=False)
    assert shop.state() == "held" and "may have applied" in shop.field("hold_reason")
    assert shop.field("leg") == ""


def test_a_late_receipt_of_the_ambiguous_attempt_proves_the_effect_before_the_settlement(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    token = ambiguous_then_refunded(shop)
    # the attempt's worker answered after all (stalled past its finish): its word is kept
    redis.hset(keys.payment(shop.pk), f"attempt:{token}", json.dumps({"outcome": "started"}))
    assert shop.attempts.finish(shop.pk, token, "fulfilled", "{}", 1.0) == ("fulfilled", "queued")
    assert (shop.field("leg"), shop.field("reversal_why")) == ("reverse", "refund")
    assert shop.attempts.start(shop.pk, "job-settle", True, leg="settle").reason == "leg"
    assert redis.hget(keys.STATS, "settled_applied") is None  # no settlement ran


def test_a_refund_undone_before_the_settlement_started_fulfils_it_after_all(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    ambiguous_then_refunded(shop)
    assert shop.field("leg") == "settle"
    undo_the_refund(shop)
    verdict = shop.attempts.start(shop.pk, "job-settle", True, leg="settle", settles=True)
    assert verdict.reason == "not_taken_back"
    assert (shop.field("leg"), shop.field("taken_back"), shop.state()) == ("", "", "queued")
    assert shop.attempts.start(shop.pk, "job-2", True, settles=True).verdict == "go"


def undo_the_refund(shop: Shop) -> None:
    """What the ledger holds once the refund failed (refund.failed: -1) and no charge event
    counts it: the payment no longer taken back."""
    refund_id = next(iter(json.loads(shop.field("rf"))))
    shop.redis.hset(keys.payment(shop.pk), "rf", json.dumps({refund_id: -1}))
    shop.redis.hdel(keys.payment(shop.pk), "rf_charge")


def test_a_refund_undone_after_its_settlement_started_is_held_for_a_person(
    redis, redis_server, rng
) -> None:
    """Its settlement's answer was lost (it may have voided the key): nothing can apply it
    under that key, and the customer paid after all."""
    shop = Shop(redis_server, rng)
    ambiguous_then_refunded(shop)
    assert settle(shop, "retry", "settlement: no answer")[1] == "retrying"
    undo_the_refund(shop)
    redis.hset(keys.payment(shop.pk), "next_at", 0)
    start = shop.attempts.start(shop.pk, "job-settle-2", True, leg="settle", settles=True)
    assert start.reason == "not_taken_back"
    assert (shop.state(), shop.field("leg")) == ("held", "")
    assert "voided its key" in shop.field("hold_reason")


def test_a_settlement_that_voids_a_payment_no_longer_taken_back_holds_it(
    redis, redis_server, rng
) -> None:
    shop = Shop(redis_server, rng)
    ambiguous_then_refunded(shop)
    start = shop.attempts.start(shop.pk, "job-settle", True, leg="settle", settles=True)
    undo_the_refund(shop)  # while the settlement's call ran
    assert shop.attempts.finish(shop.pk, start.token, "voided", "{}", 1.0) == ("voided", "held")
    assert "voided its key" in shop.field("hold_reason") and shop.field("leg") == ""


def test_a_settlement_outcome_is_refused_outside_a_settlement(redis, redis_server, rng) -> None:
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", True, settles=True)
    with pytest.raises(Exception, match="voided is a settlement"):
        shop.attempts.finish(shop.pk, start.token, "voided", "{}", 1.0)
    assert shop.state() == "in_progress"


# --- the built-in actions against real databases -------------------------------------------


def sqlite_action(tmp_path: Path) -> SqliteAction:
    return SqliteAction(str(tmp_path / "downstream.sqlite3"))


def test_sqlite_settle_voids_an_absent_key_and_a_late_attempt_then_applies_nothing(
    tmp_path: Path,
) -> None:
    action = sqlite_action(tmp_path)
    assert action.settle(call("pi_void", token=2)) == {"outcome": "voided"}
    assert action.settle(call("pi_void", token=3)) == {"outcome": "voided"}  # idempotent
    with pytest.raises(PermanentDownstreamError, match="voided"):
        action(call("pi_void", token=1))  # the ambiguous attempt's worker, still running
    db = open_downstream(action.path)
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (0,)
    assert db.execute("SELECT payment_key, token FROM voids").fetchall() == [("pi_void", 2)]


def test_sqlite_settle_finds_an_order_that_applied(tmp_path: Path) -> None:
    action = sqlite_action(tmp_path)
    action(call("pi_done", token=1))
    assert action.settle(call("pi_done", token=2))["outcome"] == "already_applied"
    db = open_downstream(action.path)
    assert db.execute("SELECT count(*) FROM voids").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (1,)


def test_postgres_settle_voids_or_finds_under_the_primary_key(postgres_url: str) -> None:
    postgres_schema.migrate(postgres_url)
    action = PostgresAction(postgres_url, 2.0, None)
    try:
        assert action.settle(call("pi_pg_void", token=2)) == {"outcome": "voided"}
        assert action.settle(call("pi_pg_void", token=3)) == {"outcome": "voided"}
        with pytest.raises(PermanentDownstreamError, match="voided"):
            action(call("pi_pg_void", token=1))
        assert action(call("pi_pg_done", token=1))["outcome"] == "applied"
        found = action.settle(call("pi_pg_done", token=2))
        assert found == {"outcome": "already_applied", "receipt": {}}
    finally:
        action.close()
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            f"SELECT payment_key, token, voided_at IS NOT NULL FROM {postgres_schema.TABLE}"
            " WHERE payment_key LIKE 'pi_pg_%' ORDER BY payment_key"
        ).fetchall()
    assert rows == [("pi_pg_done", 1, False), ("pi_pg_void", 2, True)]


def test_postgres_migrate_adds_voided_at_to_an_older_table(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {postgres_schema.TABLE}")
        conn.execute(postgres_schema.SCHEMA.replace(",\n    voided_at timestamptz", ""))
    lacking = postgres_schema.problem(postgres_url, None)
    assert lacking is not None and "lacks voided_at" in lacking[1]
    assert postgres_schema.migrate(postgres_url) == "added voided_at"
    assert postgres_schema.migrate(postgres_url) == "already there"
    assert postgres_schema.problem(postgres_url, None) is None


# --- the real job, in this process, with the built-in SQLite action ------------------------


def settled_by_the_job(
    f: Any, redis: Any, config: dict[str, object], rng: random.Random, applied: bool
) -> tuple[str, SqliteAction]:
    """A payment whose call (applied or not) got no answer, refunded in full, then settled
    by the real job with the built-in SQLite action (and reversed when it found the order)."""
    paid = samples.payment_events(rng)[2]
    pk = str(paid["data"]["object"]["id"])
    amount = int(paid["data"]["object"]["amount_received"])
    f.deliver(paid)
    redis.delete("rq:queue:fulfilment")  # its worker took the job, then stalled
    start = f.attempts.start(pk, "job-1", True, settles=True)
    action = SqliteAction(str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))
    if applied:  # the call applied; its answer never came back
        action(purchase_of(pk, start.token, stored_fields(redis, pk)))
    f.attempts.finish(pk, start.token, "retry", "no answer", 1.0)
    for event in refund_events(rng, pk, amount, amount):
        f.deliver(event)
    assert text(redis.hget(keys.payment(pk), "leg")) == "settle"
    f.work()
    f.sweep()  # the reversal due when it found the order: the sweeper's job
    f.work()
    return pk, action


@pytest.mark.parametrize("applied", [True, False])
def test_the_job_settles_a_refunded_payment_against_the_sqlite_downstream(
    fulfilment: Any, redis: Any, config: dict[str, object], rng: random.Random, applied: bool
) -> None:
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"])
    pk, action = settled_by_the_job(f, redis, config, rng, applied)
    db = sqlite3.connect(action.path)
    orders = db.execute("SELECT count(*), count(reversed_at) FROM orders").fetchone()
    voids = db.execute("SELECT count(*) FROM voids").fetchone()[0]
    if applied:
        assert settled_as(redis, pk, "reversed")
        assert (orders, voids) == ((1, 1), 0)
    else:
        assert settled_as(redis, pk, "refunded_unfulfilled")
        assert (orders, voids) == ((0, 0), 1)


def test_settlements_are_counted_in_the_summary_the_cli_and_metrics(
    fulfilment: Any, redis: Any, config: dict[str, object], rng: random.Random, client: Any
) -> None:
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"])
    found, _ = settled_by_the_job(f, redis, config, rng, applied=True)
    voided, _ = settled_by_the_job(f, redis, config, rng, applied=False)
    answer = client.get("/ops/api/summary", headers=BEARER).get_json()["reversals"]
    assert (answer["settles_due"], answer["settled_voided"], answer["settled_applied"]) == (2, 1, 1)
    m = scrape(client)
    assert m["webhook_settlements_due_total"][()] == 2
    by_outcome = {dict(k)["outcome"]: v for k, v in m["webhook_settlements_total"].items()}
    assert by_outcome == {"voided": 1, "applied": 1}
    assert "settled: no effect, key voided" in run_cli(config, "summary").stdout
    page = client.get(f"/ops/api/payments/{voided}", headers=BEARER).get_json()
    assert [a["leg"] for a in page["attempts"]] == ["fulfil", "settle"]
    assert page["attempts"][-1]["outcome"] == "voided"
    page = client.get(f"/ops/api/payments/{found}", headers=BEARER).get_json()
    assert [a["leg"] for a in page["attempts"]] == ["fulfil", "settle", "reverse"]


def test_calls_on_two_downstreams_leave_a_refunded_payment_held(redis, redis_server, rng) -> None:
    """FULFILMENT_ACTION moved (a shop from its SQLite file to PostgreSQL) after a call that
    may have applied: the second is never made (held, the first downstream named), so no
    payment's calls go to two; one from before that rule (called_on naming two) is held when
    refunded, never settled on either: a person checks both."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-0", True, settles=True, downstream="sqlite:aaaa")
    shop.attempts.finish(shop.pk, start.token, "retry", "no answer", 1.0)
    redis.hset(keys.payment(shop.pk), "next_at", 0)
    moved = shop.attempts.start(shop.pk, "job-1", True, settles=True, downstream="postgresql:bbbb")
    assert (moved.verdict, moved.reason, shop.state()) == ("skip", "moved", "held")
    assert shop.field("called_on") == shop.field("moved_from") == "sqlite:aaaa"
    redis.hset(keys.payment(shop.pk), mapping={"state": "retrying", "next_at": 0})
    redis.hset(keys.payment(shop.pk), "called_on", "sqlite:aaaa postgresql:bbbb")
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        shop.deliver(event)
    assert (shop.state(), shop.field("leg")) == ("held", "")
    assert "several downstreams" in shop.field("hold_reason")


def test_a_worker_whose_action_moved_does_not_settle_on_its_own_downstream(
    fulfilment: Any, redis: Any, config: dict[str, object], rng: random.Random, tmp_path: Path
) -> None:
    """The one call went to another SQLite file than the settling worker's: its settlement
    is given up (held), never a void on a downstream the call did not reach."""
    f = fulfilment()
    paid = samples.payment_events(rng)[2]
    pk = str(paid["data"]["object"]["id"])
    amount = int(paid["data"]["object"]["amount_received"])
    f.deliver(paid)
    redis.delete("rq:queue:fulfilment")
    elsewhere = downstream_of(SqliteAction(str(tmp_path / "before-the-move.sqlite3")))
    start = f.attempts.start(pk, "job-1", True, settles=True, downstream=elsewhere)
    f.attempts.finish(pk, start.token, "retry", "no answer", 1.0)
    for event in refund_events(rng, pk, amount, amount):
        f.deliver(event)
    assert text(redis.hget(keys.payment(pk), "leg")) == "settle"
    f.work()
    assert settled_as(redis, pk, "held")
    assert "check that downstream" in text(redis.hget(keys.payment(pk), "last_error"))
    db = open_downstream(str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))
    assert db.execute("SELECT count(*) FROM voids").fetchone() == (0,)


def answerless_call(redis, redis_server, rng, downstream: str) -> Shop:
    """A paid payment whose replay-safe, settling call to ``downstream`` had no answer (it
    may have applied): retrying, due now."""
    shop = Shop(redis_server, rng)
    shop.deliver(shop.paid)
    start = shop.attempts.start(shop.pk, "job-1", True, settles=True, downstream=downstream)
    shop.attempts.finish(shop.pk, start.token, "retry", "no answer", 1.0)
    redis.hset(keys.payment(shop.pk), "next_at", 0)
    return shop


def test_a_later_attempt_that_is_not_replay_safe_does_not_hide_a_call_that_may_have_applied(
    redis, redis_server, rng
) -> None:
    """FULFILMENT_REPLAY_SAFE turned off for the same HTTP endpoint after a call with no
    answer (another downstream would hold it: test_downstream_names.py); the next call
    refuses (nothing applied by it). Refunded in full: held (the first may have applied),
    never refunded_unfulfilled over it."""
    shop = answerless_call(redis, redis_server, rng, "http:aaaa")
    start = shop.attempts.start(shop.pk, "job-2", False, downstream="http:aaaa")
    assert shop.attempts.mark_calling(shop.pk, start.token)
    shop.attempts.finish(shop.pk, start.token, "retry", "http 503", 1.0)
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        shop.deliver(event)
    assert shop.state() == "held" and "may have applied" in shop.field("hold_reason")


def test_a_payment_held_after_the_action_moved_then_refunded_is_settled_not_unfulfilled(
    redis, redis_server, rng
) -> None:
    """A call of the SQLite file with no answer, FULFILMENT_ACTION moved to an HTTP endpoint:
    held before any call there; refunded in full meanwhile, its settlement is due (the
    first call may have applied: never refunded_unfulfilled over it), which a worker of the
    moved action gives to a person, its calls having gone elsewhere (workers/jobs.py)."""
    shop = answerless_call(redis, redis_server, rng, "sqlite:aaaa")
    held = shop.attempts.start(shop.pk, "job-2", False, downstream="http:bbbb")
    assert (held.reason, shop.state()) == ("moved", "held")
    for event in refund_events(rng, shop.pk, shop.amount, shop.amount):
        shop.deliver(event)
    assert (shop.state(), shop.field("leg")) == ("queued", "settle")


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        ("postgresql://shop:pw@db/shop", "postgresql://shop:new@db/shop", True),
        ("postgresql://shop@db/shop", "postgres://shop@DB:5432/shop?sslmode=require", True),
        ("postgresql://shop_a@db/shop", "postgresql://shop_b@db/shop", False),
        ("postgresql://db/shop?host=db1", "postgresql://db/shop?host=db2", False),
        ("postgresql://db/a", "postgresql://db/shop?dbname=b", False),
        (
            "postgresql://db/s?options=-csearch_path%3Da",
            "postgresql://db/s?options=-csearch_path%3Db",
            False,
        ),
    ],
)
def test_a_postgresql_downstream_is_named_by_what_tells_databases_apart(
    one: str, other: str, same: bool
) -> None:
    def name(url: str) -> str:
        return downstream_of(PostgresAction(url, 1.0, None))

    assert (name(one) == name(other)) is same
    assert "pw" not in name(one) and "new" not in name(other)
