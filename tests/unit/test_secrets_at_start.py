"""A password pasted unencoded (a quote, a slash, a bad %-escape) never reaches what a
process prints when it starts: wait-redis's lines, a worker's refusal naming its action,
psycopg's own words about the URL."""

import os
import subprocess

import pytest

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
