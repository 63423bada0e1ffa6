"""The user's database of the PostgreSQL action for section 3: a PostgreSQL server (the
tests' harness, tests/support/postgres.py: fsync and synchronous_commit on), a database
with an orders table the effect inserts into, and the service's table (migrated).

    FULFILMENT_ACTION=<url>  FULFILMENT_SQL=EFFECT_SQL
"""

import psycopg

from tests.support.postgres import PostgresServer
from workers.postgres_schema import TABLE, migrate

EFFECT_SQL = (
    "INSERT INTO shop_orders (payment_key, amount, currency)"
    " VALUES (%(payment_key)s, %(amount)s, %(currency)s) RETURNING id"
)
"""One order row per payment, its id the receipt: the SQLite action's own effect is one
order row too (plus its call log)."""


def start() -> tuple[PostgresServer, str]:
    """A running server and the URL of its shop database, migrated."""
    server = PostgresServer().start()
    url = server.database("shop")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE shop_orders (id bigserial PRIMARY KEY, payment_key text NOT NULL,"
            " amount bigint, currency text)"
        )
    migrate(url)
    return server, url


def reset(url: str) -> None:
    """Empty the orders and the service's table: each round starts as the first."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE shop_orders, {TABLE}")
