"""The user's database of the PostgreSQL action for section 3: a PostgreSQL server (the
tests' harness, tests/support/postgres.py: fsync and synchronous_commit on), a database
with an orders table the effect inserts into (ORDER_SQL: one row per payment, as the SQLite
action's own order row), and the service's table, migrated.
"""

import psycopg

from tests.support.postgres import ORDER_SQL, PostgresServer, make_shop
from workers.postgres_schema import TABLE

__all__ = ["ORDER_SQL", "reset", "start"]


def start() -> tuple[PostgresServer, str]:
    """A running server and the URL of its shop database, migrated."""
    server = PostgresServer().start()
    return server, make_shop(server.database("shop"))


def reset(url: str) -> None:
    """Empty the orders and the service's table: each round starts as the first."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE shop_orders, {TABLE}")
