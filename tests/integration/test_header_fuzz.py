"""Every header the service reads, fuzzed through the app (Flask's test client, real Redis):
no answer is a 5xx, and every 4xx on the Stripe endpoint is counted. Also the two inputs that
were answered 500: a Content-Length of 2**64 or more, and HTTP basic auth with non-ASCII
bytes, and a Host header Werkzeug refuses, which was answered as HTML and not counted
(tests/system/test_header_fuzz_http.py sends the same over a socket to gunicorn)."""

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import keys
from ledger.limits import REPLAY_HEADER
from tests.support.constants import BEARER, OPS_TOKEN
from tests.support.helpers import paid_event, signed_headers, stats
from webhook.http import csrf_token
from webhook.receiver import LARGEST_SIZE

HEADERS = [
    "Content-Type",
    "Content-Length",
    "Content-Encoding",
    "Stripe-Signature",
    "User-Agent",
    REPLAY_HEADER,
    "Authorization",
    "X-Forwarded-For",
    "X-CSRF-Token",
    "Host",
]
"""What the app reads (webhook/intake.py, receiver.py, http.py) and what Werkzeug reads to
build a request."""
ROUTES = [
    ("POST", "/webhooks/stripe"),
    ("GET", "/ops/api/payments"),
    ("GET", "/ops/"),
    ("GET", "/metrics"),
    ("POST", "/ops/api/payments/pi_x/retry"),
    ("POST", "/ops/payments/pi_x/resolve"),  # the dashboard's form
    ("GET", "/healthz"),
    ("GET", "/readyz"),
]
HUGE_LENGTHS = ["18446744073709551616", "99999999999999999999999999999999", "9" * 4000]
NON_ASCII_BASIC = ["Basic \u00e9\u00e9\u00e9", "Basic b3BzOg\u00ff=", "basic \u0080"]
# Header values as WSGI hands them on: latin-1 text without line breaks (HTTP cannot carry
# those inside a field).
VALUES = st.one_of(
    st.text(st.characters(max_codepoint=255, exclude_characters="\r\n"), max_size=60),
    st.sampled_from(HUGE_LENGTHS + NON_ASCII_BASIC + ["-1", "+5", "0x10", " 1 ", "1e3"]),
    st.from_regex(r"(Basic|Bearer|basic) [ -\xff]{0,40}", fullmatch=True).filter(
        lambda v: "\r" not in v and "\n" not in v
    ),
)


def environ_key(name: str) -> str:
    upper = name.upper().replace("-", "_")
    return upper if upper in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{upper}"


def send(client, method: str, path: str, overrides: dict[str, str], body: bytes = b""):
    base = {"Authorization": BEARER["Authorization"], "X-CSRF-Token": csrf_token(OPS_TOKEN)}
    return client.open(path, method=method, data=body, headers=base, environ_overrides=overrides)


@pytest.mark.parametrize("length", HUGE_LENGTHS)
def test_a_content_length_of_2_64_or_more_is_413_and_counted(client, redis, length) -> None:
    answer = send(
        client,
        "POST",
        "/webhooks/stripe",
        {"CONTENT_LENGTH": length, "CONTENT_TYPE": "application/json"},
    )
    assert answer.status_code == 413 and answer.get_json()["error"] == "body_too_large"
    assert stats(redis)["rejected:body_too_large"] == 1
    assert json.loads(redis.lindex(keys.REJECTIONS, 0))["size"] == LARGEST_SIZE


@pytest.mark.parametrize("route", ["/ops/api/payments", "/ops/", "/metrics"])
@pytest.mark.parametrize("value", NON_ASCII_BASIC)
def test_basic_auth_with_non_ascii_bytes_is_401(client, route: str, value: str) -> None:
    answer = client.get(route, environ_overrides={"HTTP_AUTHORIZATION": value})
    assert answer.status_code == 401


def fuzzing(examples: int):
    """Hypothesis settings for a fuzz that uses the suite's function-scoped fixtures."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


@fuzzing(300)
@given(
    route=st.sampled_from(ROUTES),
    fuzzed=st.dictionaries(st.sampled_from(HEADERS), VALUES, min_size=1, max_size=4),
    signed=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_fuzzed_headers_are_never_a_5xx(client, redis, route, fuzzed, signed, seed) -> None:
    method, path = route
    _, body = paid_event(random.Random(seed))
    overrides = {environ_key(k): v for k, v in signed_headers(body).items()} if signed else {}
    overrides.update({environ_key(name): value for name, value in fuzzed.items()})
    before = stats(redis).get("rejected", 0)
    answer = send(client, method, path, overrides, body)
    assert answer.status_code < 500, (answer.status_code, answer.data[:300])
    if path == "/webhooks/stripe" and answer.status_code >= 400:
        assert answer.get_json()["error"]
        assert stats(redis).get("rejected", 0) == before + 1


def test_a_host_werkzeug_refuses_is_a_counted_json_rejection(client, redis) -> None:
    answer = client.post(
        "/webhooks/stripe",
        data=b"{}",
        environ_overrides={"HTTP_HOST": "9" * 300, "CONTENT_TYPE": "application/json"},
    )
    assert answer.status_code == 400 and answer.get_json()["error"] == "malformed_request"
    assert stats(redis)["rejected:malformed_request"] == 1
