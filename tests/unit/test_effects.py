"""The user's effect in the built-in downstreams: one SQL text for both databases, the
purchase as flat named parameters."""

import sqlite3

import msgspec

from ledger.purchase import Purchase, purchase_of
from ledger.purchase_shipping import shipping_json
from workers.effects import SAMPLE, for_sqlite, sql_params


def test_psycopg_named_parameters_become_sqlites() -> None:
    sql = "INSERT INTO t VALUES (%(payment_key)s, %(amount)s, 'a%%b')"
    assert for_sqlite(sql) == "INSERT INTO t VALUES (:payment_key, :amount, 'a%b')"


def test_scalars_stay_as_they_are_and_nested_values_become_json_text() -> None:
    fields = {"currency": "usd", "livemode": "1", "events": "evt_b evt_a", "p_cs": "cs_1"}
    params = sql_params(purchase_of("pi_1", 3, {**fields, "p_cs_ref": "order_7"}))
    assert params["payment_key"] == "pi_1"
    assert params["idempotency_key"] == "fulfil:pi_1"
    assert params["token"] == 3
    assert params["amount"] is None
    assert params["livemode"] is True
    assert params["client_reference_id"] == "order_7"
    assert params["event_ids"] == '["evt_b", "evt_a"]'
    assert msgspec.json.decode(params["checkout_session"])["id"] == "cs_1"


def test_the_start_up_sample_has_every_field_an_action_receives() -> None:
    """FULFILMENT_SQL is checked with SAMPLE: a field it lacks would be refused at start-up
    though it is there at run time; and none is None, so the database sees its type."""
    assert set(SAMPLE) == {f.name for f in msgspec.structs.fields(Purchase)}
    flat = ("payment_key", "client_reference_id", "customer", "customer_email", "amount")
    assert all(SAMPLE[name] is not None for name in flat + ("shipping",))


def test_fulfilment_sql_reads_where_to_ship_from_its_json_text() -> None:
    """``%(shipping)s::jsonb`` on PostgreSQL; SQLite's json_extract reads the same text."""
    address = {"line1": "1 Main St", "city": "Springfield", "country": "US"}
    shipped = {"p_pi_ship": shipping_json({"name": "Sam", "address": address})}
    sql = "SELECT json_extract(%(shipping)s, '$.address.city'), %(shipping)s IS NULL"
    params = sql_params(purchase_of("pi_1", 1, shipped))
    unshipped = sql_params(purchase_of("pi_2", 1, {}))
    db = sqlite3.connect(":memory:")
    assert db.execute(for_sqlite(sql), params).fetchone() == ("Springfield", 0)
    assert db.execute(for_sqlite(sql), unshipped).fetchone() == (None, 1)
