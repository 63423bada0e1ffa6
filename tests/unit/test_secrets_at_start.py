"""A password pasted unencoded (a quote, a slash, a bad %-escape) never reaches what a
process prints when it starts: wait-redis's lines, a worker's refusal naming its action,
psycopg's own words about the URL."""

import os
import subprocess

import pytest

from ledger.settings import SettingsError, load
from ledgerctl.replay.client import Poster
from tests.support.processes import BIN, ROOT, free_port
from workers import postgres_schema


def env_with(**settings: str) -> dict[str, str]:
    base = {"PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")}
    return {**base, "PYTHONPATH": str(ROOT), **settings}


def printed(argv: list[str], env: dict[str, str], code: int) -> str:
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout + done.stderr


def test_wait_redis_names_where_it_waits_without_the_password() -> None:
    port = free_port()
    env = env_with(REDIS_URL=f'redis://:hun"ter2@127.0.0.1:{port}/0')
    text = printed([str(BIN / "webhook-ledger"), "wait-redis", "--timeout", "0.5"], env, 3)
    assert f"waiting for Redis at redis://***@127.0.0.1:{port}/0" in text
    assert f"gave up after 0.5 s: Redis at redis://***@127.0.0.1:{port}/0" in text
    assert "ter2" not in text and "hun" not in text


@pytest.mark.parametrize(
    ("given", "shown", "why"),
    [
        (
            'postgresql://shop:s3cr"et@127.0.0.1:{port}/shop',
            "postgresql://***@127.0.0.1:{port}/shop",
            'connection to server at "127.0.0.1", port {port} failed',
        ),
        (
            "postgresql://shop@127.0.0.1:{port}/shop?password=hun%zzter2",
            "postgresql://***@127.0.0.1:{port}/shop?password=***",
            'invalid percent-encoded token: "***"',
        ),
    ],
)
def test_a_worker_refuses_its_database_action_without_the_password(
    given: str, shown: str, why: str
) -> None:
    port = free_port()
    env = env_with(FULFILMENT_ACTION=given.format(port=port))
    text = printed([str(BIN / "fulfilment-worker")], env, 2)
    assert text.startswith(f"invalid setting FULFILMENT_ACTION='{shown.format(port=port)}': ")
    assert why.format(port=port) in text
    assert "s3cr" not in text and "zzter2" not in text


def test_psycopgs_words_about_a_query_password_are_masked() -> None:
    """libpq quotes a value it cannot decode: the password given as ?password=."""
    url = "postgresql://shop@127.0.0.1:1/shop?sslmode=disable&password=hun%zzter2"
    setting, why = postgres_schema.problem(url, None, "REVERSAL_ACTION") or ("", "")
    assert setting == "REVERSAL_ACTION"
    assert why == 'cannot connect: ProgrammingError: invalid percent-encoded token: "***"'


def test_the_replays_url_is_refused_without_its_password() -> None:
    """urllib's words quote the port it read: here the password's start."""
    with pytest.raises(ValueError) as refused:
        Poster("http://user:pw-SECRET/9@127.0.0.1:8000/webhooks/stripe", 5)
    assert str(refused.value) == (
        "not an http(s) URL with a host and a port 0-65535: "
        "http://***@127.0.0.1:8000/webhooks/stripe"
    )


AT_IN_PASSWORD = "postgresql://shop:Sup3r@pGpWd8xK2vLm@127.0.0.1:5432/postgres"
"""urllib splits at the last @, libpq at the first: libpq's host is the password's tail."""


@pytest.mark.parametrize("name", ["FULFILMENT_ACTION", "REVERSAL_ACTION"])
def test_a_database_url_with_an_unencoded_at_in_its_password_is_refused(name: str) -> None:
    try:
        load({name: AT_IN_PASSWORD})
    except SettingsError as exc:
        lines = exc.problems
    else:
        lines = []
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"invalid setting {name}='postgresql://***@127.0.0.1:5432/postgres'")
    assert "percent-encode it as %40" in lines[0]
    assert "Sup3r" not in lines[0] and "pGpWd8xK2vLm" not in lines[0]
    assert load({name: AT_IN_PASSWORD.replace("Sup3r@", "Sup3r%40")})


def test_libpqs_words_about_a_part_of_the_password_are_masked() -> None:
    """What libpq says of the URL above (it reached a worker before it was refused at
    start-up): each part of a password between @ is masked too."""
    said = "failed to resolve host 'pGpWd8xK2vLm@127.0.0.1': [Errno -2] Name or service not known"
    assert postgres_schema.masked(said, AT_IN_PASSWORD) == (
        "failed to resolve host '***@127.0.0.1': [Errno -2] Name or service not known"
    )
    said = "password authentication failed for user \"shop\" (password 'Sup3r')"
    assert "Sup3r" not in postgres_schema.masked(said, AT_IN_PASSWORD)
