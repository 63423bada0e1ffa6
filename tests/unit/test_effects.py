"""The user's effect in the built-in downstreams: one SQL text for both databases, the
purchase as flat named parameters."""

from dataclasses import fields

from workers.actions import Call
from workers.effects import SAMPLE, for_sqlite, sql_params


def test_psycopg_named_parameters_become_sqlites() -> None:
    sql = "INSERT INTO t VALUES (%(payment_key)s, %(amount)s, 'a%%b')"
    assert for_sqlite(sql) == "INSERT INTO t VALUES (:payment_key, :amount, 'a%b')"


def test_scalars_stay_as_they_are_and_nested_values_become_json_text() -> None:
    call = Call("pi_1", "fulfil:pi_1", 3, None, "usd", True, ["evt_b", "evt_a"])
    assert sql_params(call) == {
        "payment_key": "pi_1",
        "idempotency_key": "fulfil:pi_1",
        "token": 3,
        "amount": None,
        "currency": "usd",
        "livemode": True,
        "event_ids": '["evt_b", "evt_a"]',
    }


def test_the_start_up_sample_has_every_field_an_action_receives() -> None:
    """FULFILMENT_SQL is checked with SAMPLE: a field it lacks would be refused at start-up
    though it is there at run time."""
    assert set(SAMPLE) == {f.name for f in fields(Call)}
