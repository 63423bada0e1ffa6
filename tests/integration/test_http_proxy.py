"""The HTTP action through an egress proxy (`HTTP_PROXY`, read from the environment as
requests does): the call goes through the proxy, its connection is the proxy's, so a call
whose answer the proxy relays a byte at a time is cut by the action's ``abort`` at the
deadline (the call stops, not the worker process), and the proxy's own name is looked up
within the connect timeout (a stalled lookup is "down", never sent). The proxy is a real
one on a loopback port, relaying bytes between the worker and the downstream."""

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from tests.integration.test_http_answers import CALL, HEAD, raw_server, trickle
from tests.integration.test_http_lookup import (  # noqa: F401 (resolver: a fixture)
    down_before_the_deadline,
    resolver,
)
from workers.deadline import DeadlineExceeded, call_within
from workers.exceptions import TransientDownstreamError
from workers.http_action import HttpAction
from workers.jobs import run_action


@contextmanager
def forward_proxy(
    refuse: Callable[[socket.socket], None] | None = None,
) -> Iterator[tuple[int, list[str]]]:
    """An HTTP forward proxy on a free loopback port: each request's line names an absolute
    URL; the proxy connects to its host and relays bytes both ways until either side
    closes; with ``refuse``, it answers every request (a CONNECT too) with what that writes
    instead. Its port, and each request line it took."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    relayed: list[str] = []
    stop = threading.Event()

    def pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def relay(client: socket.socket) -> None:
        head = b""
        while b"\r\n" not in head:
            head += client.recv(65536)
        line = head.split(b"\r\n", 1)[0].decode()
        relayed.append(line)
        if refuse is not None:
            with client:
                try:
                    refuse(client)
                except OSError:  # the caller cut the connection
                    pass
            return
        target = line.split()[1].split("/")[2]  # http://host:port/path
        host, port = target.rsplit(":", 1)
        with client, socket.create_connection((host, int(port))) as upstream:
            upstream.sendall(head)
            back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
            back.start()
            pipe(client, upstream)
            back.join(30)

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:  # closed: the test is over
                return
            threading.Thread(target=relay, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], relayed
    finally:
        stop.set()
        listener.close()


def through(monkeypatch: pytest.MonkeyPatch, proxy: str) -> None:
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_a_call_goes_through_the_proxy_and_its_answer_fulfils(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = HEAD + b'Content-Length: 12\r\n\r\n{"ok": true}'
    with raw_server(lambda conn: conn.sendall(answer)) as url, forward_proxy() as (port, seen):
        through(monkeypatch, f"http://127.0.0.1:{port}")
        receipt = HttpAction(url, 5.0, replay_safe=False)(CALL)
    assert receipt == {"status": 200, "body": '{"ok": true}'}
    assert seen == [f"POST {url} HTTP/1.1"]


def test_an_answer_the_proxy_trickles_is_cut_by_abort_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The proxy relays a status line that trickles in, a byte every 0.2 s: at the deadline
    the slot's thread calls ``abort``, which cuts the connection to the proxy (before: the
    proxy's connection was never told, so ``abort`` had nothing to cut and the call ran on
    until the watchdog ended the process)."""
    timeout = 1.0
    ended: list[BaseException] = []
    done = threading.Event()
    with raw_server(trickle(b"", 0.2, HEAD * 100)) as url, forward_proxy() as (port, seen):
        through(monkeypatch, f"http://127.0.0.1:{port}")
        action = HttpAction(url, timeout, replay_safe=False)

        def call() -> None:
            try:  # no watchdog may end pytest: the kill time is far off
                call_within(timeout, lambda: action(CALL), 600.0, action.abort)
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                ended.append(exc)
            done.set()

        threading.Thread(target=call, name="fulfil_0", daemon=True).start()
        assert done.wait(10), "the call did not stop at its deadline"
    assert [type(error) for error in ended] == [DeadlineExceeded]
    assert seen == [f"POST {url} HTTP/1.1"]


@pytest.mark.parametrize("where", ["main thread", "slot thread"])
def test_a_proxy_whose_lookup_stalls_is_down_and_never_sent_before_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
    resolver: dict[str, list[str] | None],  # noqa: F811 (the fixture)
    where: str,
) -> None:
    """The proxy's name was looked up by urllib3 in the calling thread, where glibc's wait
    outlives the deadline's signal and a slot's ``abort`` has no connection to cut."""
    resolver["stalled-proxy.test"] = None
    through(monkeypatch, "http://stalled-proxy.test:3128")
    action = HttpAction("http://downstream.test/fulfil", 2.0, replay_safe=False)
    assert "ProxyError" in down_before_the_deadline(action, 2.0, where)


PROXY_LOGIN = b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_a_proxy_that_asks_for_credentials_is_down_and_never_sent(
    monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    """Its 407 (to the tunnel's CONNECT for https, to the request itself for http) is the
    proxy's: nothing reached the downstream. It was ambiguous (``interrupted`` for a person)
    through a tunnel, and a 4xx of the downstream's (``failed``) without one."""
    with forward_proxy(lambda client: client.sendall(PROXY_LOGIN)) as (port, seen):
        for name in ("HTTP_PROXY", "HTTPS_PROXY"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{port}")
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        action = HttpAction(f"{scheme}://downstream.test:8443/fulfil", 5.0, replay_safe=False)
        with pytest.raises(TransientDownstreamError) as raised:
            action(CALL)
        outcome, _, health, _ = run_action(action, CALL, 5.0, 30.0)
    assert raised.value.down and not raised.value.sent, raised.value
    assert "407" in str(raised.value), raised.value
    assert outcome == "retry" and health.kind == "down" and not health.sent
    verb = "CONNECT" if scheme == "https" else "POST"
    assert len(seen) == 2 and all(line.startswith(verb) for line in seen), seen
