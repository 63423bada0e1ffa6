"""How the HTTP action looks its downstream's name up (workers/http_connections.py): a
resolver that stalls in C, as glibc's does when its DNS server never answers (it waits in
poll and retries it when a signal interrupts it), ends the call as "down", never sent,
within the connect timeout, in the worker's main thread and in a slot's; a name with no
address is down, never sent; and a name with several addresses is connected to each in
turn, each within the connect timeout (one that drops connections leaves the next its
time), the request still naming the name (its Host header), not the address.

The stalled resolver is the one stand-in here: socket.getaddrinfo answering for a test name
only, from C (libc's poll), the way a DNS server that never answers holds glibc's."""

import ctypes
import http.server
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.integration.test_http_answers import CALL, run_in
from workers import http_action
from workers.deadline import DeadlineExceeded, call_within
from workers.exceptions import TransientDownstreamError
from workers.http_action import HttpAction
from workers.jobs import run_action

LIBC = ctypes.CDLL(None, use_errno=True)
STALL_MS = 6000  # past the test's deadline, well inside its watchdog's 30 s


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str] | None]:
    """Names the test answers for: a list of addresses, or None for a lookup that stalls
    in C for STALL_MS and then fails as glibc's does (EAI_AGAIN). Other names: the system's."""
    names: dict[str, list[str] | None] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in names:
            return real(host, port, *args, **kwargs)
        addresses = names[host]
        if addresses is None:
            LIBC.poll(None, 0, STALL_MS)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        tcp = (socket.SOCK_STREAM, socket.IPPROTO_TCP, "")
        return [(socket.AF_INET, *tcp, (address, port)) for address in addresses]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return names


@pytest.mark.parametrize("where", ["main thread", "slot thread"])
def test_a_lookup_that_stalls_is_down_and_never_sent_before_the_deadline(
    resolver: dict[str, list[str] | None], where: str
) -> None:
    """The lookup ran in the calling thread: the deadline's signal could not end it, and a
    slot's abort had no connection to cut, so the call outlived its deadline."""
    resolver["stalled.test"] = None
    timeout = 2.0
    action = HttpAction("http://stalled.test:8080/fulfil", timeout, replay_safe=False)
    assert "ConnectTimeout" in down_before_the_deadline(action, timeout, where)
    outcome, _, health, _ = run_action(action, CALL, timeout, 30.0)
    assert outcome == "retry" and health.kind == "down" and not health.sent


def down_before_the_deadline(action: HttpAction, timeout: float, where: str) -> str:
    """Call ``action`` under its deadline in ``where`` (see ``run_in``): it must end as down,
    never sent, once its connect timeout has passed and before the deadline. Its error."""
    ended: list[tuple[BaseException, float]] = []

    def call() -> None:
        began = time.monotonic()
        try:
            call_within(timeout, lambda: action(CALL), 30.0, action.abort)
        except (TransientDownstreamError, DeadlineExceeded) as exc:
            ended.append((exc, time.monotonic() - began))

    run_in(where, call)
    ((error, took),) = ended
    assert isinstance(error, TransientDownstreamError), error
    assert error.down and not error.sent, error
    assert http_action.connect_timeout(timeout) - 0.1 <= took < timeout
    return str(error)


def test_a_name_without_an_address_is_down_and_never_sent() -> None:
    action = HttpAction("http://nowhere.invalid/fulfil", 2.0, replay_safe=False)
    with pytest.raises(TransientDownstreamError) as raised:
        action(CALL)
    assert raised.value.down and not raised.value.sent


@contextmanager
def recording_server() -> Iterator[tuple[int, list[str]]]:
    """A local HTTP server answering 200 to any POST; its port and each request's Host."""
    hosts: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            hosts.append(self.headers["Host"])
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], hosts
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_each_address_is_tried_in_turn_and_the_request_names_the_name(
    resolver: dict[str, list[str] | None],
) -> None:
    """127.0.0.2 refuses (nothing listens there), 127.0.0.1 answers: the call lands on the
    second, as urllib3's own connect would, with Host still the URL's name."""
    with recording_server() as (port, hosts):
        resolver["shop.test"] = ["127.0.0.2", "127.0.0.1"]
        receipt = HttpAction(f"http://shop.test:{port}/fulfil", 2.0, replay_safe=False)(CALL)
    assert receipt == {"status": 200, "body": "{}"}
    assert hosts == [f"shop.test:{port}"]


def test_an_address_that_drops_connections_leaves_the_next_its_time(
    resolver: dict[str, list[str] | None],
) -> None:
    """An outside review: the addresses shared one connect timeout, so a first address that
    drops SYNs (broken IPv6, a dead node in round-robin DNS) used it all and the healthy one
    was never tried: every call down, the breaker open for everyone."""
    with recording_server() as (port, hosts):
        dropping = socket.socket()
        dropping.bind(("127.0.0.2", port))
        dropping.listen(0)
        fillers = [socket.socket() for _ in range(4)]
        for filler in fillers:
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.2", port))
        # Full once its queue holds a connection (backlog 0 keeps one): the next SYN waits.
        _, made, _ = select.select([], fillers, [], 10)
        assert any(f.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for f in made)
        try:
            resolver["shop.test"] = ["127.0.0.2", "127.0.0.1"]
            action = HttpAction(f"http://shop.test:{port}/fulfil", 2.0, replay_safe=False)
            assert action(CALL) == {"status": 200, "body": "{}"}
        finally:
            for filler in fillers:
                filler.close()
            dropping.close()
    assert hosts == [f"shop.test:{port}"]
