"""A FULFILMENT_ACTION SQLite file that cannot be used (a file that is not a database, a
directory that cannot be made) where the CLI and the web read the built-in downstream's
record: one line and exit code 3 from the CLI (as an unreachable Redis), 503 JSON or a 503
page from the web naming the downstream by its safe name; never a traceback or a 500."""

import logging
import random
from pathlib import Path

import pytest
from redis import Redis

from ledger.downstream import downstream_name
from tests.integration.test_ops import deliver
from tests.support.constants import BASIC, BEARER
from tests.support.helpers import cli_ok, run_cli
from webhook import create_app


@pytest.fixture
def not_a_database(config: dict[str, object], tmp_path: Path) -> tuple[dict[str, object], str]:
    path = tmp_path / "orders.sqlite3"
    path.write_bytes(b"these bytes are no SQLite database, " * 100)
    return {**config, "FULFILMENT_ACTION": f"sqlite:///{path}"}, str(path)


def one_line(output: str) -> str:
    lines = output.splitlines()
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


def test_migrate_where_the_directory_cannot_be_made(config: dict[str, object]) -> None:
    env = {**config, "FULFILMENT_ACTION": "sqlite:////proc/nope/x.sqlite3"}
    result = run_cli(env, "downstream", "migrate")
    assert cli_ok(result, 3), result.output
    assert "/proc/nope/x.sqlite3" in one_line(result.output)


@pytest.mark.parametrize("args", [("downstream",), ("downstream", "migrate"), ("payment", "PK")])
def test_the_cli_on_a_file_that_is_not_a_database(
    not_a_database: tuple[dict[str, object], str], redis: Redis, args: tuple[str, ...]
) -> None:
    config, path = not_a_database
    pk = deliver(create_app(config).test_client(), random.Random(3))["data"]["object"]["id"]
    result = run_cli(config, *[pk if a == "PK" else a for a in args])
    assert cli_ok(result, 3), result.output
    line = one_line(result.output)
    assert path in line and "file is not a database" in line


def test_the_web_on_a_file_that_is_not_a_database(
    not_a_database: tuple[dict[str, object], str], redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    config, path = not_a_database
    client = create_app(config).test_client()
    pk = deliver(client, random.Random(3))["data"]["object"]["id"]
    with caplog.at_level(logging.INFO):
        answer = client.get(f"/ops/api/payments/{pk}", headers=BEARER)
        page = client.get(f"/ops/payments/{pk}", headers=BASIC)
    assert answer.status_code == 503 and answer.mimetype == "application/json"
    body = answer.get_json()
    assert body["error"] == "downstream_unavailable"
    assert downstream_name(path) in body["message"] and path not in body["message"]
    assert "file is not a database" in body["message"]
    assert page.status_code == 503 and page.mimetype == "text/html"
    assert downstream_name(path) in page.text and path not in page.text
    assert not [r for r in caplog.records if r.exc_info], "an exception was logged"
