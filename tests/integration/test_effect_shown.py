"""A SQLite or PostgreSQL downstream with no effect configured records only the payment's
key (receipt ``{}``): a legitimate mode, said wherever the downstream is, so it is never
taken for a working one: the worker's start-up line, the banner (tests/unit/test_banner.py)
and the payment's page. Never with the database's password."""

import logging

import pytest

from tests.support.constants import BASIC
from tests.support.helpers import payment_key_of
from tests.support.purchases import checkout_purchase
from webhook import create_app
from workers import postgres_schema
from workers.actions import settings_or_exit

NONE = "effect: none — only the key is recorded ({}_SQL or {}_EFFECT adds yours)"
EFFECT = ": effect: "
"""What the start-up line of a built-in database action says (another line says replay-safety)."""


def password_of(url: str) -> str:
    return url.split("@")[0].rsplit(":", 1)[1]


def test_the_worker_says_at_start_that_only_the_key_is_recorded(
    postgres_url, monkeypatch, caplog
) -> None:
    postgres_schema.migrate(postgres_url)
    monkeypatch.setenv("FULFILMENT_ACTION", postgres_url)
    monkeypatch.setenv("REVERSAL_ACTION", postgres_url)
    with caplog.at_level(logging.INFO, "workers.actions"):
        settings_or_exit()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if EFFECT in r.getMessage()]
    assert [level for level, _ in said] == [logging.WARNING, logging.WARNING]
    assert said[0][1].startswith("FULFILMENT_ACTION postgresql://***@127.0.0.1:")
    assert said[0][1].endswith(": " + NONE.format("FULFILMENT", "FULFILMENT"))
    assert said[1][1].startswith("REVERSAL_ACTION postgresql://***@127.0.0.1:")
    assert said[1][1].endswith(": " + NONE.format("REVERSAL", "REVERSAL"))
    assert password_of(postgres_url) not in caplog.text


def test_the_worker_names_the_effect_it_runs(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setenv("FULFILMENT_ACTION", f"sqlite:///{tmp_path / 'd.sqlite3'}")
    monkeypatch.setenv("FULFILMENT_EFFECT", "examples.actions:grant_entitlement")
    with caplog.at_level(logging.INFO, "workers.actions"):
        settings_or_exit()
    [record] = [r for r in caplog.records if EFFECT in r.getMessage()]
    assert record.levelno == logging.INFO
    effect = "effect: FULFILMENT_EFFECT=examples.actions:grant_entitlement"
    assert record.getMessage().endswith(f": {effect}")


@pytest.mark.parametrize("reversal", [False, True], ids=["fulfilment", "and reversal"])
def test_the_payment_page_says_only_the_key_is_recorded(
    postgres_url, config, fulfilment, redis, rng, reversal
) -> None:
    env = {"FULFILMENT_ACTION": postgres_url}
    if reversal:
        env |= {"REVERSAL_ACTION": postgres_url, "REVERSAL_SQL": "SELECT 1"}
    f = fulfilment(**env)
    events = checkout_purchase(rng)
    for event in events:
        f.deliver(event)
    client = create_app({**config, **env}).test_client()
    page = client.get(f"/ops/payments/{payment_key_of(events[2])}", headers=BASIC)
    text = page.get_data(as_text=True)
    assert f"FULFILMENT_ACTION {NONE.format('FULFILMENT', 'FULFILMENT')}" in text
    assert ("REVERSAL_ACTION effect: REVERSAL_SQL (a statement)" in text) is reversal
    assert password_of(postgres_url) not in text
