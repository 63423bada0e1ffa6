"""Credentials in FULFILMENT_ACTION (and REDIS_URL) never reach the ledger, the dashboard,
the API, an export bundle, a log or the start-up banner."""

import pytest

from ledger.redact import downstream, mask_secret, origin, redact
from ledger.settings import SettingsError, fingerprint, load
from ledgerctl.banner import banner

SECRETS = ("SECRET123", "PASSWORD456", "TOKEN789", "PATHSECRET", "SESSION789")
CAPABILITY = "/hooks/T0000/B0000/PATHSECRET;jsessionid=SESSION789?api_key=SECRET123"
"""A capability URL's path: its secrets in the path, in ;params and in the query."""


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


@pytest.mark.parametrize(
    ("url", "named", "shown"),
    [
        (
            f"http://user:PASSWORD456@127.0.0.1:9{CAPABILITY}#frag",
            "http://127.0.0.1:9",
            "http://127.0.0.1:9/***",
        ),
        (
            "https://hooks.example.com" + CAPABILITY,
            "https://hooks.example.com:443",
            "https://hooks.example.com:443/***",
        ),
        ("http://[::1]:8080/x;SESSION789", "http://[::1]:8080", "http://[::1]:8080/***"),
        ("http://[::1]:8080", "http://[::1]:8080", "http://[::1]:8080"),
        ("http://h.example:99999/PATHSECRET", "***", "***"),
        ("sqlite:///var/downstream.sqlite3", "***", "sqlite:///var/downstream.sqlite3"),
    ],
)
def test_a_downstream_is_named_by_its_origin(url: str, named: str, shown: str) -> None:
    """In errors: the origin alone; as the FULFILMENT_ACTION setting: /*** where more was."""
    assert origin(url) == named
    assert downstream(url) == shown


def test_start_up_banner_masks_credentials_and_shows_secrets_by_fingerprint() -> None:
    env = {
        "REDIS_URL": "redis://:PASSWORD456@127.0.0.1:6389/0",
        "FULFILMENT_ACTION": "https://shop.example" + CAPABILITY,
        "OPS_TOKEN": "TOKEN789",
        "STRIPE_WEBHOOK_SECRET": "whsec_cliSECRET123,whsec_localSECRET123",
        "STRIPE_WEBHOOK_SECRET_LABELS": "cli,local",
        "WEB_PORT": "8000",
    }
    settings = load(env)
    shown = banner(env, settings, "whsec_localSECRET123", dev_token="another")
    assert "redis://***@127.0.0.1:6389/0" in shown
    assert "downstream    https://shop.example:443/***" in shown
    assert f"cli    {fingerprint('whsec_cliSECRET123')}" in shown
    assert f"local  {fingerprint('whsec_localSECRET123')}  var/dev.env" in shown
    assert "from OPS_TOKEN (not shown)" in shown
    assert not any(secret in shown for secret in SECRETS)


def test_a_wrong_setting_is_named_with_its_credentials_masked() -> None:
    """A problem line quotes the value it got: URLs redacted, secrets by their kind only."""
    env = {
        "FULFILMENT_ACTION": "ftp://user:PASSWORD456@h/x?key=SECRET123",
        "REDIS_URL": "redis://:PASSWORD456@127.0.0.1:6389/99",
        "STRIPE_WEBHOOK_SECRET": "sk_live_SECRET123",
        "OPS_TOKEN": " TOKEN789",
        "STRIPE_API_KEY": "whsec_SECRET123",
    }
    with pytest.raises(SettingsError) as refused:
        load(env)
    lines = refused.value.problems
    assert [line.split("=")[0] for line in lines] == [
        "invalid setting REDIS_URL",
        "invalid setting STRIPE_WEBHOOK_SECRET",
        "invalid setting OPS_TOKEN",
        "invalid setting FULFILMENT_ACTION",
        "invalid setting STRIPE_API_KEY",
    ]
    text = "\n".join(lines)
    assert "ftp://***@h/x?key=***" in text and "redis://***@127.0.0.1:6389/99" in text
    assert "STRIPE_WEBHOOK_SECRET='sk_live_***':" in text
    assert "STRIPE_API_KEY='whsec_***':" in text
    assert not any(secret in text for secret in SECRETS)


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        ("whsec_abc", "whsec_***"),
        ("sk_test_abc,rk_live_x", "sk_test_***,rk_live_***"),
        ("ops-token", "***"),
        ("whsec_", "***"),
        ("", ""),
    ],
)
def test_mask_secret_keeps_only_the_kind(value: str, masked: str) -> None:
    assert mask_secret(value) == masked
