"""Credentials in FULFILMENT_ACTION (and REDIS_URL) never reach the ledger, the dashboard,
the API, an export bundle, a log or the start-up banner."""

import base64
import random
import subprocess
import sys

import pytest
import requests

from ledger import keys
from ledger.redact import redact
from ledgerctl import samples
from tests.conftest import OPS_TOKEN
from tests.support.helpers import payment_key_of, settled_as
from tests.support.processes import ROOT, free_port, service_env, wait_until

SECRETS = ("SECRET123", "PASSWORD456", "TOKEN789")
BEARER = {"Authorization": f"Bearer {OPS_TOKEN}"}
BASIC = {"Authorization": "Basic " + base64.b64encode(f"ops:{OPS_TOKEN}".encode()).decode()}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded with url: "
            "/fulfil?api_key=SECRET123&x=1 (Caused by NewConnectionError(...))",
            "HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded with url: "
            "/fulfil?api_key=***&x=*** (Caused by NewConnectionError(...))",
        ),
        ("http://user:PASSWORD456@h:80/f?k=SECRET123", "http://***@h:80/f?k=***"),
        ("redis://:p@ss@127.0.0.1:6389/0", "redis://***@127.0.0.1:6389/0"),
        ("https://h/f?SECRET123", "https://h/f?***"),
        ("https://h/f?a=1;b=SECRET123#frag", "https://h/f?a=***;b=***"),
        ("'url': 'https://h/f?key=SECRET123'", "'url': 'https://h/f?key=***'"),
        ("Authorization: Bearer TOKEN789\nnext", "Authorization: ***\nnext"),
        ("{'Authorization': 'Basic TOKEN789', 'X': 1}", "{'Authorization': '***', 'X': 1}"),
        ('"proxy-authorization": "TOKEN789"', '"proxy-authorization": "***"'),
        ("http 500: did it apply? unknown", "http 500: did it apply? unknown"),
        ("sqlite:///var/downstream.sqlite3", "sqlite:///var/downstream.sqlite3"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_refused_connection_error_is_stored_and_shown_redacted(stack, redis, tmp_path) -> None:  # noqa: ANN001
    """The issue's case: a refused connection stored ``url: /fulfil?api_key=SECRET123``."""
    port = free_port()  # nothing listens: ConnectionError, retried, then failed
    action = f"http://user:PASSWORD456@127.0.0.1:{port}/fulfil?api_key=SECRET123"
    s = stack(FULFILMENT_ACTION=action, MAX_ATTEMPTS="2")
    web = s.start_web()
    s.start_worker()
    s.start_sweeper()
    event = samples.payment_events(random.Random(3))[2]
    s.send(samples.encode(event))
    pk = payment_key_of(event)
    wait_until(lambda: settled_as(redis, pk, "failed"))
    stored = b" ".join(b"=".join(kv) for kv in redis.hgetall(keys.payment(pk)).items()).decode()
    assert "ConnectionError" in stored and "/fulfil?api_key=***" in stored
    api = requests.get(f"{web.url}/ops/api/payments/{pk}", headers=BEARER, timeout=10).text
    page = requests.get(f"{web.url}/ops/payments/{pk}", headers=BASIC, timeout=10).text
    index = requests.get(f"{web.url}/ops/", headers=BASIC, timeout=10).text
    assert "api_key=***" in api and "api_key=***" in page
    cli = [sys.executable, "-m", "ledgerctl.cli"]
    subprocess.run([*cli, "export", str(tmp_path / "b")], env=s.env, check=True)
    exported = " ".join(p.read_text() for p in (tmp_path / "b").iterdir())
    shown = subprocess.run([*cli, "payment", pk], env=s.env, capture_output=True, text=True)
    logs = " ".join(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))
    for text in (stored, api, page, index, exported, shown.stdout, logs):
        assert not any(secret in text for secret in SECRETS)


def test_start_up_banner_masks_credentials() -> None:
    env = {
        "REDIS_URL": "redis://:PASSWORD456@127.0.0.1:6389/0",
        "FULFILMENT_ACTION": "https://shop.example/fulfil?api_key=SECRET123",
        "OPS_TOKEN": "ops",
        "WEB_PORT": "8000",
        "DEV_WEBHOOK_SECRET": "whsec_local",
    }
    banner = subprocess.run(
        [sys.executable, "-m", "ledgerctl.banner"],
        env=service_env("unused", env),
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert "redis://***@127.0.0.1:6389/0" in banner
    assert "https://shop.example/fulfil?api_key=***" in banner
    assert not any(secret in banner for secret in SECRETS)
    assert "python -m ledgerctl.banner" in (ROOT / "scripts" / "run.sh").read_text()


def test_a_bad_action_spec_is_stored_redacted(monkeypatch) -> None:  # noqa: ANN001
    """The error of an action that cannot be built is stored on each payment it fails;
    FULFILMENT_ACTION is quoted in it."""
    from workers import jobs

    monkeypatch.setenv("FULFILMENT_ACTION", "ftp://user:PASSWORD456@h/x?key=SECRET123")
    jobs._context.cache_clear()
    ctx = jobs._context(-1)
    jobs._context.cache_clear()
    assert ctx.action is None and "ftp://***@h/x?key=***" in ctx.action_error
    assert not any(secret in ctx.action_error for secret in SECRETS)
