"""What one HTTP call says about the downstream as a whole (workers/gating.py health_of),
against a real local HTTP server: the circuit breaker counts only "down" answers."""

import socket
import ssl
import threading
from pathlib import Path

import pytest

from ledger.gate import Health
from ledger.purchase import purchase_of
from tests.support.downstream_server import CountingDownstream
from tests.support.processes import free_port
from workers.exceptions import FulfilmentError
from workers.gating import health_of
from workers.http_action import HttpAction

TLS_PEM = Path(__file__).resolve().parents[1] / "fixtures" / "tls" / "self-signed.pem"
CALL = purchase_of("pi_1", 1, {"amount": "100", "currency": "usd", "events": "evt_1"})


def health_of_call(url: str) -> Health:
    try:
        HttpAction(url, timeout=2.0, replay_safe=False)(CALL)
    except FulfilmentError as exc:
        return health_of(exc)
    return health_of(None)


@pytest.mark.parametrize(
    ("status", "retry_after", "expected"),
    [
        (200, None, Health("up")),
        (409, None, Health("up")),
        (400, None, Health("up")),  # this payment's refusal: the downstream answers
        (500, None, Health("up")),  # this payment's failure
        (501, None, Health("up")),
        (503, None, Health("down")),
        (503, 7, Health("down", retry_after_s=7.0)),
        (429, 30, Health("down", retry_after_s=30.0)),
        (502, None, Health("down")),
        (504, None, Health("down")),
        (301, None, Health("none")),  # not followed: it may have acted, says nothing more
        (303, None, Health("none")),
    ],
)
def test_answers(status: int, retry_after: int | None, expected: Health) -> None:
    with CountingDownstream() as downstream:
        downstream.go_down(status, retry_after)
        assert health_of_call(downstream.url) == expected


def test_a_refused_connection_is_down_and_never_sent() -> None:
    assert health_of_call(f"http://127.0.0.1:{free_port()}/fulfil") == Health("down", sent=False)


def test_a_name_that_does_not_resolve_is_down_and_never_sent() -> None:
    assert health_of_call("http://downstream.invalid/fulfil") == Health("down", sent=False)


def test_a_resolver_that_fails_for_now_is_down_and_never_sent(monkeypatch) -> None:
    """EAI_AGAIN (a resolver timing out, SERVFAIL): urllib3's NameResolutionError says
    "Temporary failure in name resolution", no request was sent. Before, every payment
    called during a DNS outage waited ``interrupted`` for a person."""

    def failing(*args: object, **kwargs: object) -> None:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", failing)
    assert health_of_call("http://downstream.example/fulfil") == Health("down", sent=False)


def test_a_certificate_not_trusted_is_down_and_never_sent() -> None:
    """A downstream whose certificate fails verification (expired, self-signed, another
    name) never receives the request: the handshake ends before it. Named by the TLS
    library's reason, not an errno read off the SSL error's code."""
    with TlsListener() as listener:
        try:
            HttpAction(f"https://127.0.0.1:{listener.port}/fulfil", 2.0, replay_safe=False)(CALL)
        except FulfilmentError as exc:
            assert health_of(exc) == Health("down", sent=False)
            assert "CERTIFICATE_VERIFY_FAILED" in str(exc), exc
            assert "Operation not permitted" not in str(exc), exc
        else:
            raise AssertionError("the call succeeded against an untrusted certificate")
    assert listener.received == b""


class TlsListener:
    """A TLS server with a self-signed certificate (tests/fixtures/tls): records what its
    one connection sent once the handshake was done, if it was."""

    def __init__(self) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(TLS_PEM)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = b""
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        conn.settimeout(5)
        with conn:
            try:
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    self.received = tls.recv(65536)
            except (ssl.SSLError, OSError):
                pass  # the client refused the handshake

    def __enter__(self) -> "TlsListener":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join(10)
        self.sock.close()
