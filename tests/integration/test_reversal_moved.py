"""A reversal only where the effect is: a payment fulfilled on one downstream, then
FULFILMENT_ACTION moved to another (docs/ACTIONS.md: "move by changing the URL"), then
refunded in full. Its reversal is not called on the new downstream: the payment is held for
a person, whose reason names both downstreams by their safe names (docs/REVERSAL.md). The
real job in this process (RQ's SimpleWorker), a real redis-server and a real PostgreSQL."""

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from redis import Redis

from ledger import keys
from ledger.downstream import open_downstream
from ledger.stored import text
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import cli_ok, run_cli, settled_as
from tests.support.inprocess import Fulfilment
from tests.support.postgres import ORDER_SQL, USER_PASSWORD, PostgresServer, make_shop
from tests.support.refunds import refund_events
from workers.actions import downstream_of
from workers.http_action import HttpAction
from workers.postgres_action import PostgresAction

REVERSED_SQL = (
    "UPDATE shop_orders SET reversed = reversed + %(reversal_amount)s"
    " WHERE payment_key = %(payment_key)s RETURNING reversed"
)


@pytest.fixture
def shop(postgres_url: str) -> str:
    """The merchant's database: orders, with how much of each was taken back."""
    make_shop(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE shop_orders ADD COLUMN reversed bigint NOT NULL DEFAULT 0")
    return postgres_url


def on_postgres(url: str) -> dict[str, str]:
    return {
        "FULFILMENT_ACTION": url,
        "FULFILMENT_SQL": ORDER_SQL,
        "REVERSAL_ACTION": url,
        "REVERSAL_SQL": REVERSED_SQL,
    }


def on_http(
    monkeypatch: pytest.MonkeyPatch, fulfilment: Callable[..., Fulfilment], url: str, **env: str
) -> Fulfilment:
    """Workers restarted with both actions on an HTTP app (the effect settings unset)."""
    for name in ("FULFILMENT_SQL", "REVERSAL_SQL"):
        monkeypatch.delenv(name, raising=False)
    return fulfilment(**{"FULFILMENT_ACTION": url, "REVERSAL_ACTION": url, **env})


def fulfilled(f: Fulfilment, rng: random.Random) -> tuple[str, int]:
    paid = samples.payment_events(rng)[2]
    pk, amount = str(paid["data"]["object"]["id"]), int(paid["data"]["object"]["amount_received"])
    f.deliver(paid)
    f.work()
    assert settled_as(f.redis, pk, "fulfilled")
    return pk, amount


def refunded(f: Fulfilment, rng: random.Random, pk: str, amount: int, paid: int = 0) -> None:
    """A refund of ``amount`` (in full unless ``paid`` says more), its jobs run."""
    for event in refund_events(rng, pk, paid or amount, amount):
        f.deliver(event)
    f.work()
    f.sweep()
    f.work()


def order(url: str, pk: str) -> tuple[int, int]:
    """The order's row count and what was taken back of it."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT count(*), coalesce(sum(reversed), 0) FROM shop_orders WHERE payment_key = %s",
            (pk,),
        ).fetchone()
        assert rows is not None
        return int(rows[0]), int(rows[1])


def reversal_keys(url: str, pk: str) -> list[str]:
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT idempotency_key FROM webhook_ledger_effects WHERE idempotency_key LIKE %s",
            (f"reverse:{pk}%",),
        )
        return [r[0] for r in found.fetchall()]


def field(redis: Redis, pk: str, name: str) -> str:
    return text(redis.hget(keys.payment(pk), name) or b"")


def record(redis: Redis, pk: str, token: int) -> dict[str, Any]:
    return orjson.loads(redis.hget(keys.payment(pk), f"attempt:{token}") or b"{}")


def test_a_reversal_after_fulfilment_action_moved_is_held_not_called_on_the_new_one(
    fulfilment: Callable[..., Fulfilment],
    monkeypatch: pytest.MonkeyPatch,
    redis: Redis,
    config: dict[str, object],
    shop: str,
    rng: random.Random,
) -> None:
    """The outside review's case: fulfilled into PostgreSQL, both actions then on an HTTP
    app, a refund in full. No call on the app; held for a person, the order untouched; the
    person takes it back there by hand and resolves it: reversed."""
    f = fulfilment(**on_postgres(shop))
    pk, amount = fulfilled(f, rng)
    old = downstream_of(PostgresAction(shop, 1.0, None))
    # replay-safe: the payment's called_on names the downstream, its record need not (as a
    # payment fulfilled before attempts kept ``on``)
    assert field(redis, pk, "called_on") == old and "on" not in record(redis, pk, 1)
    with CountingDownstream() as app:
        f = on_http(monkeypatch, fulfilment, app.url)
        refunded(f, rng, pk, amount)
        assert settled_as(redis, pk, "held") and field(redis, pk, "leg") == "reverse"
        assert app.calls[pk] == 0
        assert order(shop, pk) == (1, 0) and reversal_keys(shop, pk) == []
        new = downstream_of(HttpAction(app.url, 1.0, False))
        reason = (
            f"reversal: not called: its fulfilment went to {old}, FULFILMENT_ACTION names {new}"
            " now: take it back there by hand, then resolve it as fulfilled (it becomes"
            " reversed), or retry it once FULFILMENT_ACTION names that downstream again"
        )
        assert field(redis, pk, "hold_reason") == reason
        env = {**config, "FULFILMENT_ACTION": app.url, "REVERSAL_ACTION": app.url}
        shown = run_cli(env, "payment", pk)
        assert cli_ok(shown) and reason in " ".join(shown.stdout.split())
        assert USER_PASSWORD not in shown.stdout and "/fulfil" not in shown.stdout
        # a retry while FULFILMENT_ACTION still names the app: held again, never called
        assert cli_ok(run_cli(env, "retry", pk))
        f.work()
        assert settled_as(redis, pk, "held") and app.calls[pk] == 0
    with psycopg.connect(shop, autocommit=True) as conn:  # the person takes it back by hand
        conn.execute("UPDATE shop_orders SET reversed = amount WHERE payment_key = %s", (pk,))
    assert cli_ok(run_cli(env, "resolve", pk, "--fulfilled"))
    assert settled_as(redis, pk, "reversed")
    assert field(redis, pk, "resolved_as") == "reversed"


def test_a_retry_once_fulfilment_action_names_the_old_downstream_again_reverses_it_there(
    fulfilment: Callable[..., Fulfilment],
    monkeypatch: pytest.MonkeyPatch,
    redis: Redis,
    shop: str,
    rng: random.Random,
) -> None:
    f = fulfilment(**on_postgres(shop))
    pk, amount = fulfilled(f, rng)
    with CountingDownstream() as app:
        f = on_http(monkeypatch, fulfilment, app.url)
        refunded(f, rng, pk, amount)
        assert settled_as(redis, pk, "held") and app.calls[pk] == 0
        f = fulfilment(**on_postgres(shop))
        assert f.attempts.record_decision(pk, "retry", ("held",), "person")[0] == "ok"
        f.work()
    assert settled_as(redis, pk, "reversed")
    assert order(shop, pk) == (1, amount) and reversal_keys(shop, pk) == [f"reverse:{pk}"]


def test_a_move_between_two_sqlite_files_holds_the_reversal_too(
    fulfilment: Callable[..., Fulfilment], redis: Redis, tmp_path: Path, rng: random.Random
) -> None:
    before = f"sqlite:///{tmp_path / 'before.sqlite3'}"
    f = fulfilment(FULFILMENT_ACTION=before, REVERSAL_ACTION=before)
    pk, amount = fulfilled(f, rng)
    after = f"sqlite:///{tmp_path / 'after.sqlite3'}"
    f = fulfilment(FULFILMENT_ACTION=after, REVERSAL_ACTION=after)
    refunded(f, rng, pk, amount)
    assert settled_as(redis, pk, "held")
    assert "its fulfilment went to sqlite:" in field(redis, pk, "hold_reason")
    for name, orders in (("before", [(pk, None)]), ("after", [])):
        db = open_downstream(tmp_path / f"{name}.sqlite3")
        assert db.execute("SELECT payment_key, reversed_at FROM orders").fetchall() == orders
        assert db.execute("SELECT count(*) FROM reversal_calls").fetchone() == (0,)
        db.close()


def test_each_refunds_own_reversal_is_held_after_a_move(
    fulfilment: Callable[..., Fulfilment],
    monkeypatch: pytest.MonkeyPatch,
    redis: Redis,
    shop: str,
    rng: random.Random,
) -> None:
    """REVERSAL_PER_REFUND: a partial refund's own reversal is held as the whole one is."""
    f = fulfilment(**on_postgres(shop), REVERSAL_PER_REFUND="true")
    pk, amount = fulfilled(f, rng)
    with CountingDownstream() as app:
        f = on_http(monkeypatch, fulfilment, app.url, REVERSAL_PER_REFUND="true")
        refunded(f, rng, pk, amount // 2, paid=amount)
        assert settled_as(redis, pk, "held") and field(redis, pk, "reversal_refund")
        assert app.calls[pk] == 0 and order(shop, pk) == (1, 0)
        assert "its fulfilment went to postgresql:" in field(redis, pk, "hold_reason")


def rotated(server: PostgresServer, url: str) -> str:
    """The same database under its owner's new password: its new URL."""
    user = url.split("//")[1].split(":")[0]
    server.admin(f"ALTER USER {user} PASSWORD 'rotated-pw-5d2'")
    return url.replace(USER_PASSWORD, "rotated-pw-5d2")


@pytest.mark.parametrize("change", ["password", "reversal_action", "reversal_stays"])
def test_a_reversal_goes_ahead_where_its_effect_can_be_taken_back(
    fulfilment: Callable[..., Fulfilment],
    monkeypatch: pytest.MonkeyPatch,
    redis: Redis,
    shop: str,
    postgres_server: PostgresServer,
    rng: random.Random,
    change: str,
) -> None:
    """No false alarm: the password rotated (the same database); only REVERSAL_ACTION
    changed (FULFILMENT_ACTION still names where the effect is); FULFILMENT_ACTION moved but
    REVERSAL_ACTION still names where the effect is."""
    f = fulfilment(**on_postgres(shop))
    pk, amount = fulfilled(f, rng)
    with CountingDownstream() as app:
        if change == "password":
            shop = rotated(postgres_server, shop)
            f = fulfilment(**on_postgres(shop))
        elif change == "reversal_action":
            monkeypatch.delenv("REVERSAL_SQL")
            f = fulfilment(FULFILMENT_ACTION=shop, REVERSAL_ACTION=app.url)
        else:
            monkeypatch.delenv("FULFILMENT_SQL")
            f = fulfilment(FULFILMENT_ACTION=app.url)
        refunded(f, rng, pk, amount)
        assert settled_as(redis, pk, "reversed")
        on_app = change == "reversal_action"
        assert app.calls[pk] == (1 if on_app else 0)
        assert order(shop, pk) == (1, 0 if on_app else amount)


@pytest.mark.parametrize("named", [True, False])
def test_a_move_between_two_http_apps_holds_the_reversal_unless_no_attempt_names_where(
    fulfilment: Callable[..., Fulfilment], redis: Redis, rng: random.Random, named: bool
) -> None:
    """An HTTP app that is not replay-safe: its fulfilled attempt names its downstream
    (``on``), and another URL is another downstream. A payment fulfilled before attempts kept
    ``on`` (``named`` false: no record of where, no ``called_on``) is reversed as before."""
    with CountingDownstream() as first, CountingDownstream() as second:
        f = fulfilment(FULFILMENT_ACTION=first.url, REVERSAL_ACTION=first.url)
        pk, amount = fulfilled(f, rng)
        assert record(redis, pk, 1)["on"] == downstream_of(HttpAction(first.url, 1.0, False))
        assert field(redis, pk, "called_on") == ""
        if not named:
            kept = record(redis, pk, 1)
            del kept["on"]
            redis.hset(keys.payment(pk), "attempt:1", orjson.dumps(kept))
        f = fulfilment(FULFILMENT_ACTION=second.url, REVERSAL_ACTION=second.url)
        refunded(f, rng, pk, amount)
        assert settled_as(redis, pk, "held" if named else "reversed")
        assert (first.calls[pk], second.calls[pk]) == (1, 0 if named else 1)


def test_a_payment_a_person_fulfilled_is_reversed_as_before(
    fulfilment: Callable[..., Fulfilment], redis: Redis, rng: random.Random
) -> None:
    """Resolved as fulfilled by a person (its attempt interrupted): no attempt applied it,
    so no downstream is known and its reversal runs on REVERSAL_ACTION as before."""
    with CountingDownstream() as app:
        f = fulfilment(FULFILMENT_ACTION=app.url, REVERSAL_ACTION=app.url)
        paid = samples.payment_events(rng)[2]
        pk = str(paid["data"]["object"]["id"])
        amount = int(paid["data"]["object"]["amount_received"])
        f.deliver(paid)
        redis.delete("rq:queue:fulfilment")
        start = f.attempts.start(pk, "job-1", False, downstream="http:elsewhere")
        assert f.attempts.mark_calling(pk, start.token)
        assert f.attempts.finish(pk, start.token, "interrupted", "no answer", 1.0)[1] == (
            "interrupted"
        )
        assert f.attempts.record_decision(pk, "fulfilled", ("interrupted",), "person")[0] == "ok"
        refunded(f, rng, pk, amount)
        assert settled_as(redis, pk, "reversed") and app.calls[pk] == 1
