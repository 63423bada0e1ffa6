"""Credentials in FULFILMENT_ACTION (and REDIS_URL) never reach the ledger, the dashboard,
the API, an export bundle, a log or the start-up banner."""

import re

import pytest

from ledger.redact import (
    MASK,
    downstream,
    mask_secret,
    mask_url,
    origin,
    readable,
    redact,
    url_secrets,
    without,
)
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
            "/*** (Caused by NewConnectionError(...))",
        ),
        ("http://user:PASSWORD456@h:80/f?k=SECRET123", "http://***@h:80/***?k=***"),
        ("redis://:p@ss@127.0.0.1:6389/0", "redis://***@127.0.0.1:6389/0"),
        ("https://h/f?SECRET123", "https://h/***?***"),
        ("https://h/f?a=1;b=SECRET123#frag", "https://h/***?a=***;b=***"),
        ("'url': 'https://h/f?key=SECRET123'", "'url': 'https://h/***?key=***'"),
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


PASSWORDS = ['hun"ter2', "hun'ter2", "hun<ter2", "hun`ter2", "Xk3d9/Qz+Wm2=", "ab#cdter2"]
PASSWORDS += ["ab?cdter2", "p@ss@ter2", "hun ter2"]
"""Pasted passwords, unencoded: each holds a character that ended the old pattern's match
or that urllib reads as the end of the host."""


def parts_of(password: str) -> list[str]:
    """The password and each piece of it a parser could cut it into (3 characters or more)."""
    return [password, *(p for p in re.split(r"[\"'<`/#?@ ]", password) if len(p) >= 3)]


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_url_setting_is_masked_whatever_its_password_holds(password: str) -> None:
    for url, where in [
        (f"rediss://:{password}@cache.example.net:6380/0", "cache.example.net:6380/0"),
        (f"postgresql://shop:{password}@db.example:5433/shop", "db.example:5433/shop"),
        (f"https://user:{password}@proxy.example:8443", "proxy.example:8443"),
    ]:
        shown = mask_url(url)
        assert shown == f"{url.split('://')[0]}://***@{where}"
        assert downstream(url) == shown or url.startswith("https")
        if " " not in password:  # free text: a URL ends at a space
            logged = redact(f"waiting for Redis at {url} (up to 30 s)")
            assert logged == f"waiting for Redis at {shown} (up to 30 s)"
        assert not any(part in shown for part in parts_of(password))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://shop@db:5432/shop?password=hun%zzter2",
            "postgresql://***@db:5432/shop?password=***",
        ),
        ("postgresql://shop@db:5432/shop?password=a@ter2", "postgresql://***"),
        ("redis://:hunter2@[::1:6379/0", "redis://***"),
        ("unix:///run/redis.sock?db=2", "unix:///run/redis.sock?db=***"),
        ("sqlite:///var/downstream.sqlite3", "sqlite:///var/downstream.sqlite3"),
    ],
)
def test_a_url_setting_that_urllib_cannot_read_shows_its_scheme(url: str, shown: str) -> None:
    """A query's password is masked; an @ that may be a query value's, or a URL urllib
    cannot split at all, leaves only the scheme."""
    assert mask_url(url) == shown


def test_an_http_downstream_whose_host_may_be_a_password_is_not_named() -> None:
    """urllib reads http://u:123/pw@h as host u, port 123: the password's start."""
    assert origin("http://u:123/TOKEN789@hooks.example:8080/x") == "***"
    assert "123" not in downstream("http://u:123/TOKEN789@hooks.example:8080/x")


def test_a_conninfo_password_in_an_error_is_masked() -> None:
    text = "invalid connection option in \"host=db password='PASSWORD 456' dbname=x\""
    assert redact(text) == 'invalid connection option in "host=db password=*** dbname=x"'
    assert redact("host=db password=PASSWORD456 port=5") == "host=db password=*** port=5"


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        (
            "REDIS_URL",
            "rediss://:Xk3d9/Qz+Wm2=@cache.example.net:6380/0",
            "rediss://***@cache.example.net:6380/0",
        ),
        (
            "FULFILMENT_ACTION",
            "postgresql://shop:s3c/PASSWORD456@db.example:5433/shop",
            "postgresql://***@db.example:5433/shop",
        ),
        (
            "REVERSAL_ACTION",
            "postgresql://shop:s3c#PASSWORD456@db.example:5433/shop",
            "postgresql://***@db.example:5433/shop",
        ),
        (
            "STRIPE_API_BASE",
            "https://u:s3c?PASSWORD456@stripe.example",
            "https://***@stripe.example",
        ),
    ],
)
def test_a_url_whose_password_urllib_reads_as_the_port_is_refused_in_our_words(
    name: str, value: str, shown: str
) -> None:
    """urllib's own message quotes the port it read: the password's start."""
    with pytest.raises(SettingsError) as refused:
        load({name: value})
    (line,) = refused.value.problems
    assert line.startswith(f"invalid setting {name}='{shown}': the port is not a number")
    assert "a password with / # ? must be percent-encoded" in line
    assert not any(part in line for part in ("s3c", "Xk3d9", "Qz+Wm2", "PASSWORD456"))


@pytest.mark.parametrize(
    ("said", "shown"),
    [
        (  # Stripe's 401, which quotes the key's last characters
            "Invalid API Key provided: sk_test_****************3Hq5",
            "Invalid API Key provided: sk_test_***",
        ),
        ("Invalid API Key provided: rk_live_51Abc9xYz", "Invalid API Key provided: rk_live_***"),
        ("signed with whsec_0123abcd", "signed with whsec_***"),
        ("auth=Basic ZHN1c2VyOnB3ZA== next", "auth=Basic *** next"),
        ("got bearer eyJhbGciOi.x-y_z~", "got bearer ***"),
        (
            "Max retries exceeded with url: /services/T0/B0/XXXX (Caused by NewConnectionError)",
            "Max retries exceeded with url: /*** (Caused by NewConnectionError)",
        ),
        (  # requests' raise_for_status(), in a merchant action's error and traceback
            "404 Client Error: Not Found for url: https://hooks.test/services/T0/B0/XXXX",
            "404 Client Error: Not Found for url: https://hooks.test/***",
        ),
        ("disk_full at sk_x", "disk_full at sk_x"),  # no key: too short to be one
        (  # httpx's raise_for_status(): the path of any web URL, however it is worded
            "Client error '404 Not Found' for url 'https://hooks.test/services/T0/B0/XXXX'",
            "Client error '404 Not Found' for url 'https://hooks.test/***'",
        ),
        (  # aiohttp's, its query masked as any
            "404, message='Not Found', url=URL('https://hooks.test/h/T0/B0?token=XXXX')",
            "404, message='Not Found', url=URL('https://hooks.test/***?token=***')",
        ),
        (
            "retrying wss://feed.test:8443/s/T0/B0 (down)",
            "retrying wss://feed.test:8443/*** (down)",
        ),
        ("GET http://127.0.0.1:8080/ answered 200", "GET http://127.0.0.1:8080/ answered 200"),
        (  # an IPv6 host (review s6 #4), with and without a port
            "Client error '404 Not Found' for url 'http://[fd00::1]:8080/services/T0/B0/XXXX'",
            "Client error '404 Not Found' for url 'http://[fd00::1]:8080/***'",
        ),
        (
            "404, message='Not Found', url=URL('http://[fd00::1]/h/T0/B0/XXXX')",
            "404, message='Not Found', url=URL('http://[fd00::1]/***')",
        ),
        ("POST HTTPS://hooks.test/h/XXXX failed", "POST HTTPS://hooks.test/*** failed"),
        ('{"url": "https:\\/\\/hooks.test\\/h\\/XXXX"}', '{"url": "https:\\/\\/hooks.test\\/***"}'),
        ("see https://hooks.test/a(b)/XXXX.", "see https://hooks.test/***"),
    ],
)
def test_redact_masks_keys_credentials_and_urllib3_paths(said: str, shown: str) -> None:
    assert redact(said) == shown


def test_mask_secret_names_only_stripe_kinds() -> None:
    """An ops token that happens to start with letters and ``_`` is not shown in part."""
    assert mask_secret("abc_t0ken-s3cret") == "***"
    assert mask_secret("pk_live_abc") == "pk_live_***"


@pytest.mark.parametrize(
    "echoed",
    [
        '{"url":"https:\\/\\/shop.example\\/hooks\\/T0AAA\\/B0BBB\\/s3cretXYZ"}',  # PHP's JSON
        "https%3A%2F%2Fshop.example%2Fhooks%2FT0AAA%2FB0BBB%2Fs3cretXYZ",  # percent-encoded
        "ok, token s3cretXYZ",  # one segment alone
        "signed abcd1234",
    ],
)
def test_a_capability_urls_secret_echoed_by_the_downstream_is_masked(echoed: str) -> None:
    """An outside review: a 2xx body echoing its URL JSON-escaped, percent-encoded or a
    segment alone kept the secret in the receipt, for good."""
    url = "https://shop.example/hooks/T0AAA/B0BBB/s3cretXYZ?sig=abcd1234"
    masked = without(echoed, url_secrets(url))
    assert "s3cretXYZ" not in masked and "abcd1234" not in masked and MASK in masked


def test_words_of_a_path_stay_in_a_receipt() -> None:
    secrets = url_secrets("https://shop.example/webhooks/fulfilment")
    assert without("fulfilment ok for order 42", secrets) == "fulfilment ok for order 42"


@pytest.mark.parametrize(
    "echoed",
    [
        "bad signature AbCd EfGh/IjKl12==",  # the query value form-decoded: + as a space
        "bad signature AbCd+EfGh\\u002fIjKl12\\u003d\\u003d",  # JSON-escaped, one by one
        "login p@ss&#32;w0rd! refused",  # an HTML character reference
        "login p\\u0040ss w0rd! refused",  # JSON's \\u escape (Go's for &, <, >)
        "login p%40ss+w0rd%21 refused",  # form-encoded
    ],
)
def test_a_secret_echoed_however_it_is_escaped_is_masked(echoed: str) -> None:
    """An outside review: each of these kept the query's signature or the password in an
    error's body excerpt."""
    url = "https://u:p%40ss%20w0rd!@shop.example/hook?sig=AbCd+EfGh/IjKl12=="
    masked = without(echoed, url_secrets(url))
    assert "IjKl12" not in masked and "w0rd" not in masked and MASK in masked, masked


@pytest.mark.parametrize(
    ("body", "content_type", "text"),
    [
        (
            '{"hook": "/h/T0/B0"}'.encode("utf-16"),
            "application/json; charset=utf-16",
            '{"hook": "/h/T0/B0"}',
        ),
        ('{"hook": "/h/T0/B0"}'.encode("utf-16-le"), "application/json", None),  # NULs: not text
        ("café".encode("latin-1"), "text/plain; charset=ISO-8859-1", "café"),
        ("café".encode(), "text/plain; charset=no-such-charset", "café"),
        (b"plain", "", "plain"),
    ],
)
def test_a_body_is_read_in_its_charset_or_not_at_all(
    body: bytes, content_type: str, text: str | None
) -> None:
    """Masking reads text: a body in UTF-16 read as UTF-8 spelled an echoed secret with a
    NUL between its letters, which no mask matched."""
    assert readable(body, content_type) == text
