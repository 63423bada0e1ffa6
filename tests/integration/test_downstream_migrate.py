"""``webhook-ledger downstream migrate`` makes the tables of every built-in downstream the
settings name, on a real PostgreSQL with two databases: FULFILMENT_ACTION's and
REVERSAL_ACTION's (once when they are the same), one line each naming its settings with the
URL masked; a database it cannot migrate is named by its setting too (exit 3)."""

from pathlib import Path

import pytest

from ledger import settings as settings_module
from tests.support.helpers import cli_ok, run_cli
from tests.support.postgres import USER_PASSWORD
from workers.actions import unusable

HTTP = "https://shop.example/fulfil"


def masked(url: str) -> str:
    return "postgresql://***@" + url.rpartition("@")[2]


def test_a_reversal_database_of_its_own_is_migrated(postgres_server, postgres_url) -> None:
    other = postgres_server.database(f"{postgres_url.rpartition('/')[2]}_rev")
    env = {"FULFILMENT_ACTION": HTTP, "REVERSAL_ACTION": other}
    refused = settings_module.load({}, FULFILMENT_ACTION=HTTP, REVERSAL_ACTION=other)
    assert unusable(refused) is not None  # the worker's word: run migrate
    first = run_cli(env, "downstream", "migrate")
    assert cli_ok(first), first.output
    assert first.output.splitlines() == [
        "FULFILMENT_ACTION https://shop.example:443/***: neither sqlite:/// nor postgresql://,"
        " nothing to migrate",
        f"REVERSAL_ACTION {masked(other)}: webhook_ledger_effects created",
    ]
    assert unusable(refused) is None and USER_PASSWORD not in first.output

    both = {"FULFILMENT_ACTION": postgres_url, "REVERSAL_ACTION": other}
    again = run_cli(both, "downstream", "migrate")
    assert cli_ok(again) and again.output.splitlines() == [
        f"FULFILMENT_ACTION {masked(postgres_url)}: webhook_ledger_effects created",
        f"REVERSAL_ACTION {masked(other)}: webhook_ledger_effects already there",
    ]
    same = run_cli({**both, "REVERSAL_ACTION": postgres_url}, "downstream", "migrate")
    assert cli_ok(same) and same.output.splitlines() == [
        f"FULFILMENT_ACTION and REVERSAL_ACTION {masked(postgres_url)}:"
        " webhook_ledger_effects already there"
    ]


def test_a_database_it_cannot_migrate_is_named_by_its_setting(postgres_url) -> None:
    wrong = postgres_url.replace(USER_PASSWORD, "wrong-pw-123")
    env = {"FULFILMENT_ACTION": postgres_url, "REVERSAL_ACTION": wrong}
    found = run_cli(env, "downstream", "migrate")
    assert cli_ok(found, 3), found.output
    made, refused = found.output.splitlines()
    assert made == f"FULFILMENT_ACTION {masked(postgres_url)}: webhook_ledger_effects created"
    assert refused.startswith(f"REVERSAL_ACTION {masked(wrong)}: cannot migrate: ")
    assert "password authentication failed" in refused and "wrong-pw-123" not in refused
    nothing = run_cli({"FULFILMENT_ACTION": HTTP}, "downstream", "migrate")
    assert cli_ok(nothing, 1) and "FULFILMENT_ACTION https://" in nothing.output


def test_an_http_downstream_is_named_by_its_origin_alone() -> None:
    """Its path may be a capability (a key in a webhook URL), as the banner and logs know."""
    capability = "https://hooks.example.com/services/T0/B0/SECRETPATH?key=SECRETKEY"
    found = run_cli({"FULFILMENT_ACTION": capability}, "downstream", "migrate")
    assert cli_ok(found, 1), found.output
    assert "https://hooks.example.com:443/***" in found.output and "SECRET" not in found.output


def test_the_default_downstream_says_it_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FULFILMENT_ACTION", raising=False)
    found = run_cli({}, "downstream", "migrate")
    assert cli_ok(found), found.output
    line = "FULFILMENT_ACTION sqlite:///var/downstream.sqlite3 (the default): ready"
    assert found.output.splitlines() == [line]
    assert (tmp_path / "var" / "downstream.sqlite3").is_file()
