"""A SQL effect's receipt says how many rows its statement touched, on a real PostgreSQL
and a SQLite file: a REVERSAL_SQL (or FULFILMENT_SQL) whose WHERE matches nothing is no
error, but its receipt says ``rowcount`` 0, a warning is logged and ``webhook-ledger
payment`` says so; a row that came back keeps its columns beside the count."""

import logging
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ledger import settings as settings_module
from ledgerctl.render_reversal import receipt as shown
from tests.integration.test_database_actions import call, reversal_call
from workers.actions import build_action, build_reversal_action
from workers.postgres_schema import migrate

REVOKE = (
    "UPDATE grants SET revoked = 1 WHERE payment_key = %(payment_key)s AND revoked = 0"
    " RETURNING payment_key, revoked"
)
GRANT = "INSERT INTO grants (payment_key, revoked) VALUES (%(payment_key)s, 0)"


def actions(url: str, **effects: str) -> tuple[Any, Any]:
    s = settings_module.load(
        {}, FULFILMENT_ACTION=url, REVERSAL_ACTION=url, FULFILMENT_TIMEOUT="3", **effects
    )
    return build_action(s), build_reversal_action(s)


@pytest.fixture(params=["postgresql", "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database with the table ``grants`` and the service's own tables."""
    table = "CREATE TABLE grants (payment_key text, revoked int)"
    if request.param == "sqlite":
        path = tmp_path / "downstream.sqlite3"
        with sqlite3.connect(path) as db:
            db.execute(table)
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue("postgres_url")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(table)
    migrate(url)
    return url


def by_hand(url: str, sql: str) -> None:
    """What a person runs in the database, outside the service."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db, db:
            db.execute(sql)
        return
    with psycopg.connect(url) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def test_the_receipt_counts_the_rows_and_a_reversal_that_touches_none_says_so(
    database: str, caplog
) -> None:
    fulfil, reverse = actions(database, FULFILMENT_SQL=GRANT, REVERSAL_SQL=REVOKE)
    assert fulfil(call("pi_a"))["receipt"] == {"rowcount": 1}  # no RETURNING: the count
    first = reverse(reversal_call("pi_a", 2, None, 2000))
    assert first["receipt"] == {"payment_key": "pi_a", "revoked": 1, "rowcount": 1}

    fulfil(call("pi_b"))
    by_hand(database, "UPDATE grants SET revoked = 1 WHERE payment_key = 'pi_b'")
    with caplog.at_level(logging.WARNING, logger="workers.effects"):
        found = reverse(reversal_call("pi_b", 2, None, 2000))
    assert found["outcome"] == "applied" and found["receipt"] == {"rowcount": 0}
    [line] = [r.getMessage() for r in caplog.records if r.name == "workers.effects"]
    assert line == "the reversal of pi_b touched no row (REVERSAL_SQL, key reverse:pi_b)"
    again = reverse(reversal_call("pi_b", 3, None, 2000))
    assert again["outcome"] == "already_applied" and again["receipt"] == {"rowcount": 0}
    assert shown(found).endswith('receipt: {"rowcount":0} (its effect says it touched no row)')

    fulfil, _ = actions(database, FULFILMENT_SQL=GRANT + " RETURNING 7 AS rowcount")
    assert fulfil(call("pi_c"))["receipt"] == {"rowcount": 7}  # the column's, not the count


def counted_nothing(conn: Any, purchase: dict[str, Any]) -> dict[str, int]:
    """A REVERSAL_EFFECT whose own UPDATE matched nothing, its receipt saying so."""
    return {"rowcount": 0}


def test_a_python_effect_saying_rowcount_0_is_not_shown_as_sql(database: str, caplog) -> None:
    """The receipt keeps what the function returned and not which effect ran, so the
    payment's page says what is true of either: the effect says it touched no row (the
    worker's warning is a SQL effect's alone: it counts the statement's rows itself)."""
    fulfil, reverse = actions(
        database, FULFILMENT_SQL=GRANT, REVERSAL_EFFECT=f"{__name__}:counted_nothing"
    )
    fulfil(call("pi_d"))
    with caplog.at_level(logging.WARNING, logger="workers.effects"):
        found = reverse(reversal_call("pi_d", 2, None, 2000))
    assert found["outcome"] == "applied" and found["receipt"] == {"rowcount": 0}
    assert not [r for r in caplog.records if r.name == "workers.effects"]
    assert shown(found).endswith('receipt: {"rowcount":0} (its effect says it touched no row)')
    assert "SQL" not in shown(found)
