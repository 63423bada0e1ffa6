"""The built-in database actions in this process against real databases: a PostgreSQL server
(tests/support/postgres.py) and a SQLite file. The key and the user's effect commit
together; a re-run answers the first receipt and runs nothing; each database error is
said for what it is; the same FULFILMENT_SQL text runs on both."""

import json
import logging
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from examples.shop import migrate as migrate_shop
from ledger import settings as settings_module
from ledger.purchase import Purchase, purchase_of
from ledger.reversals import ReversalCall, reversal_of
from tests.support.helpers import cli_ok, run_cli
from tests.support.postgres import USER_PASSWORD
from tests.support.processes import ROOT, free_port
from workers import postgres_schema
from workers.actions import build_action, build_reversal_action, unusable
from workers.effects import for_sqlite, sql_params
from workers.exceptions import PermanentDownstreamError, TransientDownstreamError
from workers.postgres_action import PostgresAction

ORDER_SQL = (
    "INSERT INTO shop_orders (payment_key, amount, currency)"
    " VALUES (%(payment_key)s, %(amount)s, %(currency)s) RETURNING amount, currency"
)
SQL = "FULFILMENT_SQL"
AMBIGUOUS = (
    "INSERT INTO shop_orders (payment_key) VALUES (CASE WHEN %(client_reference_id)s IS NULL"
    " THEN 'walk-in' ELSE %(client_reference_id)s END)"
)
EFFECTS: list[str] = []
"""Payment keys :func:`record_effect` was called with, in this process."""


def record_effect(conn: Any, purchase: dict[str, Any]) -> dict[str, Any]:
    """A FULFILMENT_EFFECT: an order row through the open transaction's connection."""
    EFFECTS.append(purchase["payment_key"])
    sql = for_sqlite(ORDER_SQL) if isinstance(conn, sqlite3.Connection) else ORDER_SQL
    conn.execute(sql, {k: purchase[k] for k in ("payment_key", "amount", "currency")})
    return {"granted": purchase["payment_key"], "events": purchase["event_ids"]}


def raise_sqlstate(conn: Any, purchase: dict[str, Any]) -> None:
    """A FULFILMENT_EFFECT whose database answers the SQLSTATE in ``purchase['currency']``."""
    conn.execute("SELECT fail_with(%s)", (purchase["currency"],))


def buggy_effect(conn: Any, purchase: dict[str, Any]) -> dict[str, Any]:
    """A FULFILMENT_EFFECT with bugs of its own: a message quoting the database's password
    (as a merchant's own error may), a field no purchase has."""
    if purchase["currency"] == "eur":
        raise ValueError(f"login with {USER_PASSWORD} refused")
    return {"granted": purchase["nope"]}  # KeyError


def call(pk: str = "pi_1", token: int = 1, currency: str = "usd") -> Purchase:
    paid = {"amount": "2000", "currency": currency, "livemode": "0", "events": f"evt_{pk}"}
    return purchase_of(pk, token, {**paid, "p_cs": f"cs_{pk}", "p_cs_ref": f"order_{pk}"})


def action_for(url: str, **settings: str) -> Any:
    s = settings_module.load({}, FULFILMENT_ACTION=url, FULFILMENT_TIMEOUT="2", **settings)
    return build_action(s), s


@pytest.fixture
def shop(postgres_url: str) -> str:
    """The user's database: their orders table and the service's own (migrated)."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE shop_orders (id serial, payment_key text, amount int, currency text,"
            " CHECK (currency <> 'xxx'))"
        )
        conn.execute(
            "CREATE FUNCTION fail_with(state text) RETURNS void LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'failing' USING ERRCODE = state; END $$"
        )
    assert postgres_schema.migrate(postgres_url) == "created"
    assert postgres_schema.migrate(postgres_url) == "already there"  # idempotent
    return postgres_url


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()  # type: ignore[arg-type]


def test_key_and_effect_commit_together_and_a_rerun_answers_the_first_receipt(shop) -> None:
    action, _ = action_for(shop, FULFILMENT_SQL=ORDER_SQL)
    assert action.replay_safe is True
    first = action(call(token=1))
    receipt = {"amount": 2000, "currency": "usd", "rowcount": 1}
    assert first == {"outcome": "applied", "receipt": receipt}
    again = action(call(token=2))
    assert again == {"outcome": "already_applied", "receipt": first["receipt"]}
    assert rows(shop, "SELECT payment_key FROM shop_orders") == [("pi_1",)]
    assert rows(shop, "SELECT payment_key, token FROM webhook_ledger_effects") == [("pi_1", 1)]


def test_a_python_effect_runs_once_inside_the_transaction(shop) -> None:
    EFFECTS.clear()
    action, _ = action_for(shop, FULFILMENT_EFFECT=f"{__name__}:record_effect")
    receipt = {"granted": "pi_2", "events": ["evt_pi_2"]}
    assert action(call("pi_2")) == {"outcome": "applied", "receipt": receipt}
    assert action(call("pi_2", 2)) == {"outcome": "already_applied", "receipt": receipt}
    assert EFFECTS == ["pi_2"]
    assert rows(shop, "SELECT count(*) FROM shop_orders") == [(1,)]


def test_a_constraint_violation_is_the_effects_failure_and_nothing_commits(shop) -> None:
    action, _ = action_for(shop, FULFILMENT_SQL=ORDER_SQL)
    with pytest.raises(PermanentDownstreamError, match="CheckViolation 23514"):
        action(call("pi_3", currency="xxx"))
    assert rows(shop, "SELECT count(*) FROM webhook_ledger_effects") == [(0,)]
    assert action(call("pi_3"))["outcome"] == "applied"  # a person's retry, once fixed


@pytest.mark.parametrize(
    ("state", "kind", "down"),
    [
        ("40001", TransientDownstreamError, False),  # serialization failure: same key again
        ("40P01", TransientDownstreamError, False),  # deadlock
        ("23505", PermanentDownstreamError, False),  # unique violation in the effect
        ("P0001", PermanentDownstreamError, False),  # the user's own RAISE
        ("25P03", TransientDownstreamError, False),  # the database's idle deadline: again
        ("57P01", TransientDownstreamError, True),  # admin shutdown: the downstream is down
        ("53300", TransientDownstreamError, True),  # too many connections
    ],
)
def test_each_sqlstate_is_said_for_what_it_is(shop, state, kind, down) -> None:
    action, _ = action_for(shop, FULFILMENT_EFFECT=f"{__name__}:raise_sqlstate")
    with pytest.raises(kind) as raised:
        action(call(f"pi_{state}", currency=state))
    assert type(raised.value) is kind and getattr(raised.value, "down", False) is down
    assert rows(shop, "SELECT count(*) FROM webhook_ledger_effects") == [(0,)]


def test_a_refused_connection_is_the_downstream_down_and_never_sent() -> None:
    url = f"postgresql://shop:{USER_PASSWORD}@127.0.0.1:{free_port()}/shop"
    action = PostgresAction(url, 1.0, None)
    try:
        with pytest.raises(TransientDownstreamError) as raised:
            action(call())
    finally:
        action.close()
    assert (raised.value.down, raised.value.sent) == (True, False)
    assert USER_PASSWORD not in str(raised.value)
    assert "Connection refused" in str(raised.value)  # why none came, not only that


def test_a_password_the_server_refuses_is_said_when_no_connection_comes(shop) -> None:
    """The pool connects in its own threads, where psycopg_pool only logs why it fails: a
    password rotated under a running worker read "no connection within 0.5 s" alone on the
    payment, the CLI and the dashboard."""
    wrong = "Rotated-" + USER_PASSWORD
    action = PostgresAction(shop.replace(USER_PASSWORD, wrong), 1.0, None)
    try:
        with pytest.raises(TransientDownstreamError) as raised:
            action(call())
    finally:
        action.close()
    said = str(raised.value)
    assert "no connection within" in said and "password authentication failed" in said, said
    assert wrong not in said and USER_PASSWORD not in said
    assert (raised.value.down, raised.value.sent) == (True, False)


def test_a_backend_terminated_between_calls_is_replaced(shop, postgres_server) -> None:
    action, _ = action_for(shop)
    action(call("pi_4"))
    postgres_server.admin(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        f" WHERE usename = '{shop.split('//')[1].split(':')[0]}'"
    )
    assert action(call("pi_5"))["outcome"] == "applied"


def test_a_forked_child_opens_its_own_pool_and_leaves_the_parents(shop) -> None:
    action, _ = action_for(shop)
    action(call("pi_parent"))
    child = os.fork()
    if child == 0:  # the child: its own connection; exit without closing anything
        code = 0 if action(call("pi_child"))["outcome"] == "applied" else 1
        os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert action(call("pi_parent", 2))["outcome"] == "already_applied"  # its session lives


def test_the_same_sql_text_runs_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "downstream.sqlite3"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE shop_orders (id INTEGER PRIMARY KEY, payment_key TEXT, amount INTEGER,"
        " currency TEXT CHECK (currency <> 'xxx'))"
    )
    db.commit()
    action, _ = action_for(f"sqlite:///{path}", FULFILMENT_SQL=ORDER_SQL)
    first = action(call("pi_6"))
    receipt = {"amount": 2000, "currency": "usd", "rowcount": 1}
    assert (first["outcome"], first["receipt"]) == ("applied", receipt)
    again = action(call("pi_6", 2))
    assert (again["outcome"], again["receipt"]) == ("already_applied", first["receipt"])
    with pytest.raises(PermanentDownstreamError, match="CHECK constraint failed"):
        action(call("pi_7", currency="xxx"))
    assert db.execute("SELECT payment_key FROM shop_orders").fetchall() == [("pi_6",)]
    assert db.execute("SELECT payment_key FROM orders").fetchall() == [("pi_6",)]


def test_a_python_effect_on_sqlite(tmp_path: Path) -> None:
    EFFECTS.clear()
    path = tmp_path / "downstream.sqlite3"
    sqlite3.connect(path).execute(
        "CREATE TABLE shop_orders (payment_key TEXT, amount INTEGER, currency TEXT)"
    )
    action, _ = action_for(f"sqlite:///{path}", FULFILMENT_EFFECT=f"{__name__}:record_effect")
    assert action(call("pi_8"))["receipt"] == {"granted": "pi_8", "events": ["evt_pi_8"]}
    assert action(call("pi_8", 2))["outcome"] == "already_applied"
    assert EFFECTS == ["pi_8"]


def test_a_bug_in_a_python_effect_says_where_and_its_traceback_is_logged(
    shop: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As a module:function action's (tests/unit/test_merchant_errors.py): the error names
    the effect's line, the worker's log gets the traceback, masked (the database URL's
    password too). Before: "the effect raised KeyError: 'nope'" alone."""
    line = buggy_effect.__code__.co_firstlineno + 5
    where = f"(at tests/integration/test_database_actions.py:{line} in buggy_effect)"
    for url, kind in ((shop, "postgresql"), (f"sqlite:///{tmp_path / 'shop.sqlite3'}", "sqlite")):
        action, _ = action_for(url, FULFILMENT_EFFECT=f"{__name__}:buggy_effect")
        caplog.clear()
        with caplog.at_level(logging.ERROR), pytest.raises(TransientDownstreamError) as raised:
            action(call("pi_9"))
        assert str(raised.value) == f"{kind}: the effect raised KeyError: 'nope' {where}"
        [logged] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert logged.startswith(f"pi_9 token 1: {__name__}:buggy_effect raised KeyError")
        assert "Traceback (most recent call last)" in logged and logged.endswith("'nope'\n")
    action, _ = action_for(shop, FULFILMENT_EFFECT=f"{__name__}:buggy_effect")
    caplog.clear()
    with caplog.at_level(logging.ERROR), pytest.raises(TransientDownstreamError) as raised:
        action(call("pi_9", currency="eur"))
    [logged] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert USER_PASSWORD not in str(raised.value) and USER_PASSWORD not in logged
    assert "login with *** refused" in logged


@pytest.mark.parametrize(
    ("settings", "setting", "words"),
    [
        ({SQL: "INSERT INTO nowhere VALUES (%(amount)s)"}, SQL, "nowhere"),
        ({SQL: "INSERT INTO shop_orders VALUES (%(nope)s)"}, SQL, "nope"),
        ({SQL: "SELECT 1; INSERT INTO shop_orders DEFAULT VALUES"}, SQL, "multiple commands"),
        (  # typed in binary, not as a payment sends it (text of no type): refused at start
            {SQL: AMBIGUOUS},
            SQL,
            "could not determine data type of parameter",
        ),
        ({SQL: "@/nonexistent/effect.sql"}, SQL, "cannot read"),
        ({"FULFILMENT_EFFECT": "shop_missing.effects:grant"}, "FULFILMENT_EFFECT", "import"),
    ],
)
def test_a_wrong_effect_is_refused_naming_its_setting(shop, settings, setting, words) -> None:
    s = settings_module.load({}, FULFILMENT_ACTION=shop, **settings)
    found = unusable(s)
    assert found is not None and found[0] == setting and words in found[1]
    assert USER_PASSWORD not in found[1]
    assert rows(shop, "SELECT count(*) FROM shop_orders") == [(0,)]  # planned, never run


def test_a_missing_table_or_a_wrong_password_is_refused(postgres_url) -> None:
    found = unusable(settings_module.load({}, FULFILMENT_ACTION=postgres_url))
    assert found == (
        "FULFILMENT_ACTION",
        "the table webhook_ledger_effects is missing: run 'webhook-ledger downstream migrate'",
    )
    wrong = postgres_url.replace(USER_PASSWORD, "not-the-password")
    found = unusable(settings_module.load({}, FULFILMENT_ACTION=wrong))
    assert found is not None and "password authentication failed" in found[1]
    assert "not-the-password" not in found[1]


def test_downstream_migrate_makes_the_table_once_and_masks_the_password(postgres_url) -> None:
    env = {"FULFILMENT_ACTION": postgres_url}
    first, again = run_cli(env, "downstream", "migrate"), run_cli(env, "downstream", "migrate")
    named = "FULFILMENT_ACTION postgresql://***@" + postgres_url.rpartition("@")[2]
    assert cli_ok(first) and first.output.strip() == f"{named}: webhook_ledger_effects created"
    assert (
        cli_ok(again) and again.output.strip() == f"{named}: webhook_ledger_effects already there"
    )
    assert unusable(settings_module.load({}, FULFILMENT_ACTION=postgres_url)) is None
    wrong = {"FULFILMENT_ACTION": postgres_url.replace(USER_PASSWORD, "wrong-pw-123")}
    refused = run_cli(wrong, "downstream", "migrate")
    assert cli_ok(refused, 3) and "password authentication failed" in refused.output
    assert "wrong-pw-123" not in refused.output and len(refused.output.splitlines()) == 1


def test_a_database_that_is_not_utf8_is_refused_by_migrate_and_at_start(
    postgres_server,
) -> None:
    """SQL_ASCII (initdb with a C locale and no encoding): migrate said created, the worker
    then found no voided_at (psycopg reads text there as bytes) and a second migrate failed
    on it (merchant review). Now both say the encoding, in one line, and nothing is made."""
    name = f"ascii{os.getpid()}"
    postgres_server.admin(f"CREATE USER {name} PASSWORD '{USER_PASSWORD}'")
    postgres_server.admin(
        f"CREATE DATABASE {name} OWNER {name} ENCODING 'SQL_ASCII' TEMPLATE template0"
        " LC_COLLATE 'C' LC_CTYPE 'C'"
    )
    url = postgres_server.url(name, USER_PASSWORD, name)
    refused = run_cli({"FULFILMENT_ACTION": url}, "downstream", "migrate")
    assert cli_ok(refused, 3) and len(refused.output.splitlines()) == 1, refused.output
    assert "encoding is SQL_ASCII, not UTF8: make it with createdb --encoding=UTF8" in (
        refused.output
    )
    assert USER_PASSWORD not in refused.output
    found = unusable(settings_module.load({}, FULFILMENT_ACTION=url))
    assert found is not None and found[0] == "FULFILMENT_ACTION"
    assert "encoding is SQL_ASCII, not UTF8" in found[1]
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regclass('webhook_ledger_effects')").fetchone() == (None,)


REVERSAL_SQL = (
    "UPDATE shop_orders SET reversed = reversed + %(reversal_amount)s"
    " WHERE payment_key = %(payment_key)s RETURNING reversed, %(reversal_refund_id)s AS refund"
)


def reversal_call(pk: str, token: int, refund: str | None, amount: int) -> ReversalCall:
    stored = {"rf": json.dumps({refund: amount} if refund else {}), "reversal_why": "refund"}
    stored |= {"reversal_amount": str(amount), **({"reversal_refund": refund} if refund else {})}
    return reversal_of(call(pk, token), stored)


def reversal_for(url: str) -> Any:
    s = settings_module.load(
        {},
        FULFILMENT_ACTION=url,
        REVERSAL_ACTION=url,
        REVERSAL_SQL=REVERSAL_SQL,
        FULFILMENT_SQL=ORDER_SQL,
        FULFILMENT_TIMEOUT="2",
    )
    return build_action(s), build_reversal_action(s)


def test_each_reversal_marks_the_order_in_the_transaction_of_its_key(shop) -> None:
    """REVERSAL_SQL commits with the reversal's key: a re-run answers the first receipt and
    marks nothing again; per refund, each its own key and amount; one that fails (it would
    take back more than was paid) leaves neither its key nor its mark."""
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE shop_orders ADD COLUMN reversed int NOT NULL DEFAULT 0"
            " CHECK (reversed <= amount)"
        )
    fulfil, reverse = reversal_for(shop)
    fulfil(call("pi_r"))
    first = reverse(reversal_call("pi_r", 2, "re_1", 500))
    receipt = {"reversed": 500, "refund": "re_1", "rowcount": 1}
    assert first == {"outcome": "applied", "receipt": receipt}
    assert reverse(reversal_call("pi_r", 3, "re_1", 500))["outcome"] == "already_applied"
    assert reverse(reversal_call("pi_r", 4, "re_2", 1500))["receipt"]["reversed"] == 2000
    with pytest.raises(PermanentDownstreamError, match="CheckViolation"):
        reverse(reversal_call("pi_r", 5, None, 1))  # more than was paid: refused
    assert rows(shop, "SELECT reversed FROM shop_orders") == [(2000,)]
    assert rows(shop, "SELECT idempotency_key FROM webhook_ledger_effects ORDER BY 1") == [
        ("fulfil:pi_r",),
        ("reverse:pi_r:re_1",),
        ("reverse:pi_r:re_2",),
    ]


def test_reversal_sql_reads_what_the_refund_names(shop) -> None:
    """A refund's reason and metadata reach REVERSAL_SQL as parameters: the merchant's
    refund of one line item takes back that item (``%(reversal_refund_metadata)s::jsonb``)."""
    take_item = (
        "SELECT %(reversal_refund_metadata)s::jsonb ->> 'line_item' AS item,"
        " %(reversal_refund_reason)s AS reason,"
        " jsonb_array_length(%(reversal_refunds)s::jsonb) AS refunds"
    )
    s = settings_module.load(
        {}, FULFILMENT_ACTION=shop, REVERSAL_ACTION=shop, REVERSAL_SQL=take_item
    )
    assert unusable(s) is None
    notes = {"re_1": [1, "requested_by_customer", {"line_item": "li_hat"}]}
    stored = {"rf": json.dumps({"re_1": 500}), "reversal_why": "refund", "notes": json.dumps(notes)}
    stored |= {"reversal_amount": "500", "reversal_refund": "re_1"}
    answer = build_reversal_action(s)(reversal_of(call("pi_n", 2), stored))
    assert answer["receipt"] == {
        "item": "li_hat",
        "reason": "requested_by_customer",
        "refunds": 1,
        "rowcount": 1,
    }


def test_a_wrong_reversal_sql_is_refused_naming_its_setting(shop) -> None:
    s = settings_module.load(
        {},
        FULFILMENT_ACTION=shop,
        REVERSAL_ACTION=shop,
        REVERSAL_SQL="UPDATE nowhere SET x = %(reversal_amount)s",
    )
    found = unusable(s)
    assert found is not None and found[0] == "REVERSAL_SQL" and "nowhere" in found[1]
    ok = settings_module.load({}, FULFILMENT_ACTION=shop, REVERSAL_ACTION=shop)
    assert unusable(ok) is None


def test_sqlite_adds_each_reversal_to_its_order_and_runs_reversal_sql(tmp_path: Path) -> None:
    path = tmp_path / "downstream.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE taken (payment_key TEXT, amount INTEGER)")
    db.commit()
    url = f"sqlite:///{path}"
    s = settings_module.load(
        {},
        FULFILMENT_ACTION=url,
        REVERSAL_ACTION=url,
        REVERSAL_SQL="INSERT INTO taken VALUES (%(payment_key)s, %(reversal_amount)s)",
    )
    build_action(s)(call("pi_s"))
    reverse = build_reversal_action(s)
    assert reverse is not None
    reverse(reversal_call("pi_s", 2, "re_1", 500))
    assert reverse(reversal_call("pi_s", 3, "re_1", 500))["outcome"] == "already_applied"
    order = "SELECT reversed_amount, reversed_at IS NOT NULL FROM orders"
    assert db.execute(order).fetchall() == [(500, 0)]  # partly reversed
    reverse(reversal_call("pi_s", 4, None, 1500))  # what remains
    assert db.execute(order).fetchall() == [(2000, 1)]
    assert db.execute("SELECT * FROM taken").fetchall() == [("pi_s", 500), ("pi_s", 1500)]


def test_sqlite_reverses_what_remains_when_the_amount_paid_is_not_known(tmp_path: Path) -> None:
    """Paid only by a thin event (no amount), then a dispute lost: the reversal's amount is
    None (what remains, not known), and the order is marked reversed with nothing added."""
    path = tmp_path / "downstream.sqlite3"
    url = f"sqlite:///{path}"
    s = settings_module.load({}, FULFILMENT_ACTION=url, REVERSAL_ACTION=url)
    thin = {"livemode": "0", "events": "evt_thin"}
    build_action(s)(purchase_of("pi_t", 1, thin))
    stored = {"dispute": "dp_1 lost", "reversal_why": "dispute", "reversal_amount": ""}
    sent = reversal_of(purchase_of("pi_t", 2, thin), stored)
    assert (sent.amount, sent.reversal.amount, sent.reversal.why) == (None, None, "dispute")
    reverse = build_reversal_action(s)
    assert reverse is not None and reverse(sent)["outcome"] == "applied"
    order = "SELECT amount, reversed_amount, reversed_at IS NOT NULL FROM orders"
    assert sqlite3.connect(path).execute(order).fetchall() == [(None, 0, 1)]


def test_sqlite_marks_reversed_an_order_fulfilled_before_its_amount_was_known(
    tmp_path: Path,
) -> None:
    """Fulfilled while only its thin event had paid it (the order's amount NULL), its amount
    known later (a snapshot paid event), then refunded in full: the reversal of the whole
    payment carries the amount, and the order is marked reversed (a reversal of what
    remains takes back all of it, whatever the order's amount says)."""
    path = tmp_path / "downstream.sqlite3"
    url = f"sqlite:///{path}"
    s = settings_module.load({}, FULFILMENT_ACTION=url, REVERSAL_ACTION=url)
    thin = {"livemode": "0", "events": "evt_thin"}
    build_action(s)(purchase_of("pi_l", 1, thin))
    paid = {**thin, "amount": "2000", "currency": "usd"}
    stored = {"rf_charge": "2000", "reversal_why": "refund", "reversal_amount": "2000"}
    sent = reversal_of(purchase_of("pi_l", 2, paid), stored)
    assert (sent.reversal.refund_id, sent.reversal.amount) == (None, 2000)
    reverse = build_reversal_action(s)
    assert reverse is not None and reverse(sent)["outcome"] == "applied"
    order = "SELECT amount, reversed_amount, reversed_at IS NOT NULL FROM orders"
    assert sqlite3.connect(path).execute(order).fetchall() == [(None, 2000, 1)]


REVERSALS: list[str] = []
"""Reversal keys :func:`take_back` was called with, in this process."""


def take_back(conn: Any, purchase: dict[str, Any]) -> dict[str, Any]:
    """A REVERSAL_EFFECT: the order marked with what the reversal takes back, through the
    open transaction's connection; refused (raises) past the amount paid."""
    REVERSALS.append(purchase["idempotency_key"])
    reversal = purchase["reversal"]
    sql = REVERSAL_SQL if not isinstance(conn, sqlite3.Connection) else for_sqlite(REVERSAL_SQL)
    row = conn.execute(sql, sql_params(purchase)).fetchone()
    return {"reversed": row[0], "why": reversal["why"], "refund": reversal["refund_id"]}


def reversal_effect_for(url: str) -> Any:
    s = settings_module.load(
        {},
        FULFILMENT_ACTION=url,
        REVERSAL_ACTION=url,
        REVERSAL_EFFECT=f"{__name__}:take_back",
        FULFILMENT_SQL=ORDER_SQL,
        FULFILMENT_TIMEOUT="2",
    )
    assert unusable(s) is None
    return build_action(s), build_reversal_action(s)


def test_a_python_reversal_effect_runs_once_in_the_transaction_of_its_key(shop) -> None:
    """REVERSAL_EFFECT, REVERSAL_SQL's Python form: it gets the purchase with its reversal,
    commits with the reversal's key (a re-run answers the first receipt without calling it
    again), and one that raises leaves neither its key nor its mark."""
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE shop_orders ADD COLUMN reversed int NOT NULL DEFAULT 0"
            " CHECK (reversed <= amount)"
        )
    REVERSALS.clear()
    fulfil, reverse = reversal_effect_for(shop)
    fulfil(call("pi_e"))
    first = reverse(reversal_call("pi_e", 2, "re_1", 500))
    receipt = {"reversed": 500, "why": "refund", "refund": "re_1"}
    assert first == {"outcome": "applied", "receipt": receipt}
    assert reverse(reversal_call("pi_e", 3, "re_1", 500)) == {
        "outcome": "already_applied",
        "receipt": receipt,
    }
    with pytest.raises(PermanentDownstreamError, match="CheckViolation"):
        reverse(reversal_call("pi_e", 4, None, 1501))  # more than remains: refused
    assert reverse(reversal_call("pi_e", 5, None, 1500))["receipt"]["reversed"] == 2000
    assert REVERSALS == ["reverse:pi_e:re_1", "reverse:pi_e", "reverse:pi_e"]
    assert rows(shop, "SELECT reversed FROM shop_orders") == [(2000,)]
    assert rows(shop, "SELECT idempotency_key FROM webhook_ledger_effects ORDER BY 1") == [
        ("fulfil:pi_e",),
        ("reverse:pi_e",),
        ("reverse:pi_e:re_1",),
    ]


def test_a_python_reversal_effect_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "downstream.sqlite3"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE shop_orders (payment_key TEXT, amount INTEGER, currency TEXT,"
        " reversed INTEGER NOT NULL DEFAULT 0 CHECK (reversed <= amount))"
    )
    db.commit()
    REVERSALS.clear()
    fulfil, reverse = reversal_effect_for(f"sqlite:///{path}")
    fulfil(call("pi_q"))
    assert reverse(reversal_call("pi_q", 2, None, 2000))["receipt"]["reversed"] == 2000
    assert reverse(reversal_call("pi_q", 3, None, 2000))["outcome"] == "already_applied"
    assert REVERSALS == ["reverse:pi_q"]
    assert db.execute("SELECT reversed FROM shop_orders").fetchall() == [(2000,)]
    order = "SELECT reversed_amount, reversed_at IS NOT NULL FROM orders"
    assert db.execute(order).fetchall() == [(2000, 1)]


def test_a_reversal_effect_that_cannot_be_imported_is_refused_naming_it(shop) -> None:
    s = settings_module.load(
        {}, FULFILMENT_ACTION=shop, REVERSAL_ACTION=shop, REVERSAL_EFFECT="shop_missing:undo"
    )
    found = unusable(s)
    assert found is not None and found[0] == "REVERSAL_EFFECT" and "import" in found[1]


def test_the_examples_grant_into_the_example_shops_table(postgres_url: str) -> None:
    """examples/actions.py's ``grant_entitlement`` (FULFILMENT_EFFECT, as its docstring sets
    it) and docs/ACTIONS.md's FULFILMENT_SQL, each against the ``entitlements`` table that
    examples/shop/schema.sql makes: one entitlement per payment, with its order and email."""
    migrate_shop(postgres_url)
    doc = (ROOT / "docs" / "ACTIONS.md").read_text()
    [documented] = re.findall(r'^export FULFILMENT_SQL="(.+)"$', doc, re.MULTILINE)
    effect = {"FULFILMENT_EFFECT": "examples.actions:grant_entitlement"}
    for pk, setting in (("pi_effect", effect), ("pi_sql", {SQL: documented})):
        action, s = action_for(postgres_url, **setting)
        assert unusable(s) is None
        assert action(call(pk))["outcome"] == "applied"
    found = rows(postgres_url, "SELECT payment_key, product, amount FROM entitlements ORDER BY id")
    assert found == [("pi_effect", "pro-plan", 2000), ("pi_sql", "pro-plan", 2000)]
    granted = "SELECT count(*) FROM entitlements WHERE client_reference_id = 'order_pi_effect'"
    assert rows(postgres_url, granted) == [(1,)]


def test_sql_refused_at_start_would_have_failed_every_payment(shop) -> None:
    """Found by an outside review: the start-up check planned FULFILMENT_SQL with binary
    parameters (typed), payments ran it in text (untyped), so a parameter typed only by
    its use passed the check and failed every payment (AmbiguousParameter 42P08)."""
    action, _ = action_for(shop, FULFILMENT_SQL=AMBIGUOUS)
    with pytest.raises(PermanentDownstreamError, match="42P08"):
        action(call("pi_ambiguous"))
    typed = AMBIGUOUS.replace("%(client_reference_id)s", "CAST(%(client_reference_id)s AS text)")
    assert unusable(settings_module.load({}, FULFILMENT_ACTION=shop, FULFILMENT_SQL=typed)) is None
    assert action_for(shop, FULFILMENT_SQL=typed)[0](call("pi_typed"))["outcome"] == "applied"


def test_a_deferred_constraint_commit_refused_is_the_effects_failure(shop) -> None:
    """An error COMMIT answers rolled the transaction back: a deferred foreign key's
    violation is the effect's failure (failed at once), not an ambiguous commit retried."""
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CREATE TABLE parents (id int PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE kids (parent int REFERENCES parents DEFERRABLE INITIALLY DEFERRED)"
        )
    action, _ = action_for(shop, FULFILMENT_SQL="INSERT INTO kids VALUES (%(amount)s)")
    with pytest.raises(PermanentDownstreamError, match="ForeignKeyViolation 23503"):
        action(call("pi_deferred"))
    assert rows(shop, "SELECT count(*) FROM webhook_ledger_effects") == [(0,)]
