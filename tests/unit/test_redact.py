"""Credentials in FULFILMENT_ACTION (and REDIS_URL) never reach the ledger, the dashboard,
the API, an export bundle, a log or the start-up banner."""

import pytest

from ledger.redact import mask_secret, redact
from ledger.settings import SettingsError, fingerprint, load
from ledgerctl.banner import banner

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


def test_start_up_banner_masks_credentials_and_shows_secrets_by_fingerprint() -> None:
    env = {
        "REDIS_URL": "redis://:PASSWORD456@127.0.0.1:6389/0",
        "FULFILMENT_ACTION": "https://shop.example/fulfil?api_key=SECRET123",
        "OPS_TOKEN": "TOKEN789",
        "STRIPE_WEBHOOK_SECRET": "whsec_cliSECRET123,whsec_localSECRET123",
        "STRIPE_WEBHOOK_SECRET_LABELS": "cli,local",
        "WEB_PORT": "8000",
    }
    settings = load(env)
    shown = banner(env, settings, "whsec_localSECRET123", dev_token="another")
    assert "redis://***@127.0.0.1:6389/0" in shown
    assert "https://shop.example/fulfil?api_key=***" in shown
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
