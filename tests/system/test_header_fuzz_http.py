"""Every header the service reads, fuzzed as raw bytes over a socket to the real gunicorn
(webhook/server.py in front of the app): every request is answered, never with a 5xx, and
gunicorn logs no traceback. The same at the WSGI level: tests/integration/test_header_fuzz.py."""

import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.integration.test_header_fuzz import HEADERS, HUGE_LENGTHS, ROUTES, fuzzing
from tests.support.constants import BEARER, OPS_TOKEN, SECRET
from tests.support.helpers import paid_event, signed_headers
from tests.support.processes import Gunicorn, RedisServer, service_env

# Any byte a header value can carry on the wire but a line break (which would end it).
RAW_VALUES = st.one_of(
    st.binary(max_size=60).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
    st.sampled_from([v.encode() for v in HUGE_LENGTHS] + [b"Basic \xe9\xe9", b"Basic \xff=="]),
)


@pytest.fixture(scope="module")
def server(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gunicorn]:
    env = service_env(
        redis_server.url,
        {"STRIPE_WEBHOOK_SECRET": SECRET, "OPS_TOKEN": OPS_TOKEN, "BODY_READ_TIMEOUT": "1"},
    )
    log: Path = tmp_path_factory.mktemp("header-fuzz") / "gunicorn.log"
    web = Gunicorn(env, workers=2, log=log).start()
    yield web
    web.stop()


def status_of(port: int, request: bytes) -> int:
    """Send the request and end the write side; the answer's status (0: none). The server
    may answer and close before the whole request is sent (a Content-Length shorter than
    the body): its answer is read all the same."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        try:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # closed by the server already (EPIPE, ECONNRESET, ENOTCONN)
            pass
        raw = b""
        try:
            while piece := sock.recv(65536):
                raw += piece
        except OSError:  # reset after its answer (a timeout reads as no answer: 0)
            pass
    final = raw[raw.rfind(b"HTTP/1.") :] if raw else b""  # after a "100 Continue", if any
    return int(final.split(b" ", 2)[1]) if final else 0


@fuzzing(200)
@given(
    route=st.sampled_from(ROUTES),
    fuzzed=st.dictionaries(st.sampled_from(HEADERS), RAW_VALUES, min_size=1, max_size=4),
    seed=st.integers(0, 2**32),
)
def test_fuzzed_headers_over_a_socket_are_never_a_5xx(server, route, fuzzed, seed) -> None:
    method, path = route
    _, body = paid_event(random.Random(seed))
    fields = {
        "Host": b"x",
        "Authorization": BEARER["Authorization"].encode(),
        "Content-Length": str(len(body)).encode(),
        **{k: v.encode() for k, v in signed_headers(body).items()},
    }
    fields.update(fuzzed)
    lines = [f"{method} {path} HTTP/1.1".encode()]
    lines += [name.encode() + b": " + value for name, value in fields.items()]
    request = b"\r\n".join([*lines, b"", b""]) + body
    status = status_of(server.port, request)
    assert 0 < status < 500, (status, request[:500])
    assert "Traceback" not in server.log.read_text()  # type: ignore[union-attr]
