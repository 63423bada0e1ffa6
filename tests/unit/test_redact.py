"""Credentials in FULFILMENT_ACTION (and REDIS_URL) never reach the ledger, the dashboard,
the API, an export bundle, a log or the start-up banner."""

import pytest

from ledger.redact import redact
from ledgerctl.banner import banner
from tests.support.processes import ROOT

SECRETS = ("SECRET123", "PASSWORD456", "TOKEN789")


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


def test_start_up_banner_masks_credentials() -> None:
    env = {
        "REDIS_URL": "redis://:PASSWORD456@127.0.0.1:6389/0",
        "FULFILMENT_ACTION": "https://shop.example/fulfil?api_key=SECRET123",
        "OPS_TOKEN": "ops",
        "WEB_PORT": "8000",
        "DEV_WEBHOOK_SECRET": "whsec_local",
    }
    shown = banner(env)
    assert "redis://***@127.0.0.1:6389/0" in shown
    assert "https://shop.example/fulfil?api_key=***" in shown
    assert not any(secret in shown for secret in SECRETS)
    assert "python -m ledgerctl.banner" in (ROOT / "scripts" / "run.sh").read_text()


def test_a_bad_action_spec_is_stored_redacted(monkeypatch) -> None:
    """The error of an action that cannot be built is stored on each payment it fails;
    FULFILMENT_ACTION is quoted in it."""
    from workers import jobs

    monkeypatch.setenv("FULFILMENT_ACTION", "ftp://user:PASSWORD456@h/x?key=SECRET123")
    jobs._context.cache_clear()
    ctx = jobs._context(-1)
    jobs._context.cache_clear()
    assert ctx.action is None and "ftp://***@h/x?key=***" in ctx.action_error
    assert not any(secret in ctx.action_error for secret in SECRETS)
