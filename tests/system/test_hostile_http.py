"""Malformed HTTP, and requests no view takes, over raw sockets: every case is a 4xx JSON
reason, counted, no traceback.

gunicorn's parser refuses some of these before the app sees a request (the worker in
webhook/server.py answers them); the others break inside the body, which the worker reads
whole, within BODY_READ_TIMEOUT, before the app runs.
"""

import json
import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from ledgerctl import samples
from tests.support.constants import SECRET
from tests.support.helpers import paid_event, stats
from tests.support.processes import Gunicorn, RedisServer, service_env

_, BODY = paid_event(random.Random(20261203))
SIGNATURE = samples.sign(BODY, SECRET)


def head(*lines: str, target: str = "/webhooks/stripe", version: str = "HTTP/1.1") -> bytes:
    """A request line and headers for a signed JSON POST, then the given header lines."""
    return "\r\n".join(
        [
            f"POST {target} {version}",
            "Host: x",
            "Content-Type: application/json",
            f"Stripe-Signature: {SIGNATURE}",
            *lines,
            "Connection: close",
            "",
            "",
        ]
    ).encode()


def bare(method: str, target: str) -> bytes:
    """A request with no body and no credentials."""
    return f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()


def fresh(data: bytes) -> bytes:
    """The request signed now: the cases are built at collection, which may be minutes
    (more than the signature tolerance) before the test runs in a long suite."""
    return data.replace(SIGNATURE.encode(), samples.sign(BODY, SECRET).encode())


def chunked(*lines: str) -> bytes:
    return head("Transfer-Encoding: chunked", *lines)


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


LENGTH = f"Content-Length: {len(BODY)}"
END = b"0\r\n\r\n"
SIZE = f"{len(BODY):x}".encode()
# (name, bytes sent before the write side is closed, expected status, expected reason)
CASES = [
    ("chunked, valid", chunked() + chunk(BODY) + END, 200, None),
    (
        "chunked, invalid chunk size",
        chunked() + b"zz\r\n" + BODY + b"\r\n" + END,
        400,
        "malformed_body",
    ),
    (
        "chunked, missing chunk terminator",
        chunked() + chunk(BODY)[:-2] + b"XX" + END,
        400,
        "malformed_body",
    ),
    (
        "chunked, invalid chunk extension",
        chunked() + SIZE + b";=\r\n" + BODY + b"\r\n" + END,
        400,
        "malformed_body",
    ),
    ("chunked, size line over the limit", chunked() + b"1" * 9000, 400, "malformed_body"),
    ("chunked, cut off by EOF", chunked() + chunk(BODY)[:100], 400, "incomplete_body"),
    ("chunked, no last chunk", chunked() + chunk(BODY), 400, "incomplete_body"),
    (
        "chunked, over MAX_BODY_BYTES",
        chunked() + chunk(b" " * 270_000) * 2 + END,
        413,
        "body_too_large",
    ),
    (
        "chunked, HTTP/1.0",
        head("Transfer-Encoding: chunked", version="HTTP/1.0") + chunk(BODY),
        400,
        "malformed_request",
    ),
    (
        "Content-Length larger than the body",
        head(f"Content-Length: {len(BODY) + 50}") + BODY,
        400,
        "incomplete_body",
    ),
    (
        "Content-Length smaller than the body",
        head(f"Content-Length: {len(BODY) - 50}") + BODY,
        400,
        "signature_mismatch",
    ),
    ("Content-Length not a number", head("Content-Length: 12a") + BODY, 400, "malformed_request"),
    ("two Content-Length headers", head(LENGTH, LENGTH) + BODY, 400, "malformed_request"),
    (
        "Content-Length and Transfer-Encoding",
        head(LENGTH, "Transfer-Encoding: chunked") + chunk(BODY) + END,
        400,
        "malformed_request",
    ),
    (
        "unknown Transfer-Encoding",
        head("Transfer-Encoding: rot13, chunked") + BODY,
        400,
        "unsupported_transfer_coding",
    ),
    (
        "gzip before chunked, the body plain",
        head("Transfer-Encoding: gzip, chunked") + chunk(BODY) + END,
        400,
        "unsupported_transfer_coding",
    ),
    (
        "identity before chunked",
        head("Transfer-Encoding: identity, chunked") + chunk(BODY) + END,
        400,
        "unsupported_transfer_coding",
    ),
    (
        "gzip and chunked on two lines",
        head("Transfer-Encoding: gzip", "Transfer-Encoding: chunked") + chunk(BODY) + END,
        400,
        "unsupported_transfer_coding",
    ),
    ("gzip alone", head("Transfer-Encoding: gzip") + BODY, 400, "unsupported_transfer_coding"),
    # From 127.0.0.1, in gunicorn's forwarded_allow_ips: gunicorn would mount the app under it
    ("SCRIPT_NAME header", head(LENGTH, "SCRIPT_NAME: /x") + BODY, 400, "script_name_refused"),
    (
        "SCRIPT_NAME header, a prefix of the path",
        head(LENGTH, "SCRIPT_NAME: /webhooks") + BODY,
        400,
        "script_name_refused",
    ),
    ("Content-Length over MAX_BODY_BYTES", head("Content-Length: 99999999"), 413, "body_too_large"),
    ("a header over 8 KB", head("X-Big: " + "a" * 9000, LENGTH) + BODY, 431, "headers_too_large"),
    (
        "more than 100 headers",
        head(*(f"X-{i}: a" for i in range(101)), LENGTH) + BODY,
        431,
        "headers_too_large",
    ),
    (
        "request line over 4 KB",
        head(LENGTH, target="/webhooks/stripe?" + "a" * 5000) + BODY,
        414,
        "request_line_too_long",
    ),
    ("obsolete line folding", head(LENGTH, "X-Folded: a", " b") + BODY, 400, "malformed_request"),
    ("header name with a space", head(LENGTH, "Bad Name: a") + BODY, 400, "malformed_request"),
    ("unknown HTTP version", head(LENGTH, version="HTTP/9.1") + BODY, 400, "malformed_request"),
    (
        "method with a bad character",
        head(LENGTH).replace(b"POST", b"PO@T", 1) + BODY,
        400,
        "malformed_request",
    ),
    ("not HTTP at all", b"\x00\xffNOT HTTP\r\n\r\n", 400, "malformed_request"),
    # No route: JSON 404, counted (Flask's HTML before; /webhooks//stripe was a 308 redirect).
    ("trailing slash", head(LENGTH, target="/webhooks/stripe/") + BODY, 404, "unknown_path"),
    ("inner slash doubled", head(LENGTH, target="/webhooks//stripe") + BODY, 404, "unknown_path"),
    ("unknown path", head(LENGTH, target="/nope") + BODY, 404, "unknown_path"),
    ("OPTIONS *", bare("OPTIONS", "*"), 404, "unknown_path"),
    ("unknown ops page", bare("GET", "/ops/nope"), 404, "unknown_path"),
    ("method the route does not take", bare("PUT", "/healthz"), 405, "method_not_allowed"),
    ("ops API without the token", bare("GET", "/ops/api/summary"), 401, "unauthorized"),
    ("metrics without the token", bare("GET", "/metrics"), 401, "unauthorized"),
    ("Expect: 100-continue", head(LENGTH, "Expect: 100-continue") + BODY, 200, None),
    ("Expect: anything else", head(LENGTH, "Expect: 200-ok") + BODY, 417, "expectation_failed"),
    ("body stalls before its end", head(LENGTH) + BODY[:100], 408, "body_timeout"),
]


def exchange(port: int, data: bytes, close_write: bool = True) -> tuple[int, dict, bytes]:
    """Send ``data``, read until the server closes: (status, JSON body, raw answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(data)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        raw = b""
        try:
            while piece := sock.recv(65536):
                raw += piece
        except ConnectionResetError:  # a close with bytes left unread, after the answer
            assert raw, "reset before any answer"
    final = raw[raw.rindex(b"HTTP/1.1 ") :]  # after a "100 Continue", if any
    status = int(final.split(b" ", 2)[1])
    headers, _, body = final.partition(b"\r\n\r\n")
    assert b"Content-Type: application/json" in headers, raw[:300]
    return status, json.loads(body), raw


@pytest.fixture(scope="module")
def server(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gunicorn]:
    """One server for the module, with a 1 s body deadline so a stalled body is quick."""
    env = service_env(redis_server.url, {"STRIPE_WEBHOOK_SECRET": SECRET, "BODY_READ_TIMEOUT": "1"})
    log: Path = tmp_path_factory.mktemp("hostile-http") / "gunicorn.log"
    web = Gunicorn(env, workers=2, log=log).start()
    yield web
    web.stop()


@pytest.mark.parametrize(
    ("data", "status", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed_http_is_a_counted_json_rejection(
    server, redis: Redis, data: bytes, status: int, reason: str | None
) -> None:
    # A stalled client keeps its side open; every other one has sent all it will send.
    got, answer, raw = exchange(server.port, fresh(data), close_write=reason != "body_timeout")
    assert got == status, raw[:400]
    if reason is None:
        assert answer["event_id"]
    else:
        assert answer["error"] == reason
        assert stats(redis)[f"rejected:{reason}"] == 1
        assert stats(redis)["rejected"] == 1
    assert raw.count(b"HTTP/1.1 4") + raw.count(b"HTTP/1.1 2") == 1  # one answer, never two
    assert server.log is not None
    assert "Traceback" not in server.log.read_text()


def test_an_unread_bad_body_gets_one_answer_not_two(server, redis: Redis) -> None:
    """A keep-alive request the app would refuse without reading its body (415 here):
    the broken chunked body must not produce a second, stray answer on the connection."""
    data = (
        chunked().replace(b"application/json", b"text/plain").replace(b"Connection: close\r\n", b"")
        + b"zz\r\nabc\r\n0\r\n\r\n"
    )
    status, answer, raw = exchange(server.port, fresh(data))
    assert (status, answer["error"]) == (400, "malformed_body")
    assert raw.count(b"HTTP/1.1 ") == 1
