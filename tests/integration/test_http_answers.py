"""How the HTTP action (workers/http_action.py) reads what a real local server sends, byte
for byte (a raw socket server, no mock): an interim 1xx taken for the answer is ambiguous,
never a refusal; a connection that never completes is "down", never sent, well before the
deadline, in the worker's main thread and in a slot's; a 2xx status line is the answer
whatever its body does after it (trickles, never ends, is huge, is not the gzip it says, is
shorter than its Content-Length); a refusal or an error keeps its body's first 200 characters,
masked, read the same bounded way; and a call whose answer trickles in is cut by its
``abort`` at the deadline, so the call stops instead of the worker process."""

import gzip
import select
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import quote

import pytest

from ledger.purchase import purchase_of
from workers import http_action
from workers.deadline import DeadlineExceeded, call_within
from workers.exceptions import (
    AmbiguousDownstreamError,
    PermanentDownstreamError,
    TransientDownstreamError,
)
from workers.http_action import HttpAction
from workers.jobs import run_action

CALL = purchase_of("pi_1", 1, {"amount": "100", "currency": "usd", "events": "evt_1"})
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


@contextmanager
def raw_server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A server on a free loopback port: each connection's request is read (headers and a
    Content-Length body), then ``answer`` writes what it likes; the URL to call."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = [
                int(h.split(b":")[1])
                for h in head.split(b"\r\n")
                if h.lower().startswith(b"content-length")
            ]
            while len(body) < (length[0] if length else 0):
                body += conn.recv(65536)
            try:
                answer(conn)
            except OSError:  # the caller closed or cut the connection
                pass

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/fulfil"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def trickle(head: bytes, every_s: float = 0.5, then: bytes = b"x" * 10_000) -> Callable:
    def answer(conn: socket.socket) -> None:
        conn.sendall(head)
        for byte in then:
            conn.sendall(bytes([byte]))
            time.sleep(every_s)

    return answer


@pytest.mark.parametrize("interim", [102, 103])
def test_an_interim_answer_is_ambiguous_never_a_refusal(interim: int) -> None:
    """http.client skips only 100: a 102 or 103 came back as the status, read as a 4xx-like
    refusal (`failed`, and a person's retry applied it twice). The 200 after it is unread."""

    def answer(conn: socket.socket) -> None:
        conn.sendall(f"HTTP/1.1 {interim} Interim\r\nLink: </a.css>\r\n\r\n".encode())
        conn.sendall(HEAD + b"Content-Length: 2\r\n\r\n{}")

    with raw_server(answer) as url:
        action = HttpAction(url, 2.0, replay_safe=False)
        with pytest.raises(AmbiguousDownstreamError, match=f"http {interim} from"):
            action(CALL)
        outcome, _, health, _ = run_action(action, CALL, 2.0, 30.0)
        assert outcome == "interrupted" and health.kind == "up"  # it answered
        assert run_action(HttpAction(url, 2.0, replay_safe=True), CALL, 2.0, 30.0)[0] == "retry"


def run_in(where: str, call: Callable[[], None]) -> None:
    """``call`` in this thread, or in a worker slot's (workers.deadline tells them apart by
    its name), waited for."""
    if where == "main thread":
        call()
        return
    slot = threading.Thread(target=call, name="fulfil_0")
    slot.start()
    slot.join(30)


@contextmanager
def full_backlog() -> Iterator[str]:
    """A listener that never accepts, its backlog filled: a new connection's SYN is dropped,
    its handshake never completes (as a blackholed host's)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    # Full once the queue holds a connection (backlog 0 keeps one): the others' SYNs wait.
    _, made, _ = select.select([], fillers, [], 10)
    assert any(f.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for f in made), made
    try:
        yield f"http://127.0.0.1:{port}/fulfil"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


@pytest.mark.parametrize("where", ["main thread", "slot thread"])
def test_a_connection_never_made_is_down_and_never_sent_before_the_deadline(where: str) -> None:
    """The connect timeout was the deadline itself: the deadline always came first, and the
    payment went `interrupted` though nothing was sent."""
    timeout = 2.0
    with full_backlog() as url:
        action = HttpAction(url, timeout, replay_safe=False)
        ended: list[object] = []

        def call() -> None:
            began = time.monotonic()
            try:
                call_within(timeout, lambda: action(CALL), 30.0, getattr(action, "abort", None))
            except (TransientDownstreamError, DeadlineExceeded) as exc:
                ended.append((exc, time.monotonic() - began))

        run_in(where, call)
        ((error, took),) = ended
        assert isinstance(error, TransientDownstreamError), error
        assert error.down and not error.sent and "ConnectTimeout" in str(error)
        assert took < timeout and took >= http_action.connect_timeout(timeout) - 0.1
        outcome, _, health, _ = run_action(action, CALL, timeout, 30.0)
        assert outcome == "retry" and health.kind == "down" and not health.sent


def test_the_connect_timeout_is_well_inside_the_deadline() -> None:
    assert http_action.connect_timeout(1.0) == 0.5 and http_action.connect_timeout(3.0) == 1.5
    assert http_action.connect_timeout(30.0) == 3.05


BODIES = {
    "trickles": trickle(HEAD + b"Content-Length: 10000\r\n\r\n" + b'{"order": "ord_1"}'),
    "never ends": trickle(HEAD + b"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n", 0.3, b"x" * 100),
    "gzip that is not": lambda conn: conn.sendall(
        HEAD + b'Content-Encoding: gzip\r\nContent-Length: 16\r\n\r\n{"order": "ord"}'
    ),
    "shorter than said": lambda conn: conn.sendall(
        HEAD + b'Content-Length: 1000\r\n\r\n{"order": "ord"}'
    ),
}


@pytest.mark.parametrize("body", list(BODIES))
@pytest.mark.parametrize("where", ["main thread", "slot thread"])
def test_a_2xx_is_done_whatever_its_body_does(body: str, where: str) -> None:
    """Before: a trickle or an endless body outlived the deadline (`interrupted`), a body
    that broke its encoding or length raised (ContentDecodingError, ChunkedEncodingError:
    `interrupted`), though the 200 said it applied."""
    timeout = 2.0
    ended: list[tuple[str, str, float]] = []
    with raw_server(BODIES[body]) as url:
        action = HttpAction(url, timeout, replay_safe=False)

        def call() -> None:
            began = time.monotonic()
            outcome, detail, *_ = run_action(action, CALL, timeout, 30.0)
            ended.append((outcome, detail, time.monotonic() - began))

        run_in(where, call)
    ((outcome, detail, took),) = ended
    assert outcome == "fulfilled", detail
    assert detail.startswith('{"status":200,') and took < timeout


def test_a_huge_2xx_body_is_not_read() -> None:
    """A 50 MB body: only its first few KiB are read (before: all of it, in memory)."""
    size = 50 * 1024 * 1024
    sent = [0]

    def answer(conn: socket.socket) -> None:
        conn.sendall(HEAD + f"Content-Length: {size}\r\n\r\n".encode())
        block = b"a" * 65536
        while sent[0] < size:
            conn.sendall(block)
            sent[0] += len(block)

    with raw_server(answer) as url:
        tracemalloc.start()
        try:
            receipt = HttpAction(url, 5.0, replay_safe=False)(CALL)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert receipt == {"status": 200, "body": "a" * 200}
    assert peak < 2 * 1024 * 1024, peak


def test_a_trickling_answer_in_a_slot_is_cut_by_abort_at_the_deadline() -> None:
    """Its status line trickles in, a byte every 0.2 s: at the deadline the slot's thread
    calls the action's ``abort``, which cuts the connection, and the call stops then (before:
    no ``abort``, it ran on until the watchdog ended the process)."""
    timeout = 1.0
    ended: list[tuple[BaseException, float]] = []
    with raw_server(trickle(b"", 0.2, HEAD * 100)) as url:
        action = HttpAction(url, timeout, replay_safe=False)
        # No watchdog may end pytest if it does not stop: the kill time is far off, and
        # the test gives up waiting for the slot long before it.
        helper_done = threading.Event()

        def call() -> None:
            began = time.monotonic()
            try:
                call_within(timeout, lambda: action(CALL), 600.0, getattr(action, "abort", None))
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                ended.append((exc, time.monotonic() - began))
            helper_done.set()

        threading.Thread(target=call, name="fulfil_0", daemon=True).start()
        assert helper_done.wait(10), "the call did not stop at its deadline"
    ((error, took),) = ended
    assert isinstance(error, DeadlineExceeded) and took < timeout + 1.0


def refusing(status: int, body: bytes, then: bytes = b"") -> Callable:
    """An error answer with ``body`` sent at once, then ``then`` a byte every 0.3 s."""
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n".encode()
    length = f"Content-Length: {len(body) + len(then)}\r\n\r\n".encode()
    return trickle(head + length + body, 0.3, then)


def test_a_refusal_says_what_the_downstream_answered() -> None:
    """The merchant app's own reason, after the status: before, only `http 422 from …`."""
    said = b'{"error":{"message":"sku \'pro-plan\' out of stock"}}'
    with raw_server(refusing(422, said)) as url:
        outcome, detail, *_ = run_action(HttpAction(url, 2.0, False), CALL, 2.0, 30.0)
    origin = url.removesuffix("/fulfil")
    assert outcome == "failed"
    assert detail == f"http 422 from {origin}: {said.decode()}"


def test_an_error_body_is_masked_cut_short_and_on_one_line() -> None:
    """A capability URL's secrets quoted back (as written, JSON-escaped, percent-encoded),
    a bearer token, a long body over lines: masked, its first 200 characters, one line."""
    hook = "/hooks/T0000/B0000/S3cretToken9;jsessionid=SESSION789"
    quoted = (
        '{"error": "no such hook", "path": "' + hook.replace("/", "\\/") + '",\r\n'
        '"url": "' + quote(hook, safe="") + '", "token": "S3cretToken9", "key": "SECRET123",\n'
        '"seen": "Authorization: Bearer tok_abcdef123456"}\n'
    )
    with raw_server(refusing(500, (quoted + "x" * 300).encode())) as url:
        action = HttpAction(url.replace("/fulfil", hook + "?api_key=SECRET123"), 2.0, True)
        with pytest.raises(AmbiguousDownstreamError) as raised:
            action(CALL)
    error = str(raised.value)
    for secret in ("S3cretToken9", "SESSION789", "SECRET123", "tok_abcdef", "hooks"):
        assert secret not in error, error
    head = f"http 500 from {url.removesuffix('/fulfil')}: "
    assert error.startswith(head + '{"error": "no such hook", "path": "***", "url": "***"'), error
    assert "\n" not in error and "\r" not in error and error.endswith("x")
    assert len(error) <= len(head) + http_action.KEPT


@pytest.mark.parametrize(
    ("status", "outcome", "down"),
    [(422, "failed", "up"), (500, "interrupted", "up"), (503, "retry", "down")],
)
def test_an_error_body_that_trickles_changes_neither_the_outcome_nor_the_deadline(
    status: int, outcome: str, down: str
) -> None:
    """Its body is read as a 2xx's is: until four fifths of the timeout, then cut; the
    error keeps what came and stands as its status says."""
    timeout = 2.0
    with raw_server(refusing(status, b'{"error": "busy"', b"x" * 100)) as url:
        began = time.monotonic()
        ended, detail, health, _ = run_action(HttpAction(url, timeout, False), CALL, timeout, 30.0)
        took = time.monotonic() - began
    assert (ended, health.kind) == (outcome, down), detail
    assert detail.startswith(f'http {status} from {url.removesuffix("/fulfil")}: {{"error": "busy"')
    assert timeout * http_action.BODY_SHARE - 0.3 < took < timeout, took


def test_an_encoded_error_body_is_named_not_shown_as_bytes() -> None:
    """Read as sent (not decoded), a gzip body came out as mojibake in the error."""
    body = gzip.compress(b'{"error": "out of stock"}')
    head = b"HTTP/1.1 422 Unprocessable\r\nContent-Encoding: gzip\r\n"
    answer = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    with raw_server(lambda conn: conn.sendall(answer)) as url:
        with pytest.raises(PermanentDownstreamError) as raised:
            HttpAction(url, 5.0, replay_safe=False)(CALL)
    assert str(raised.value).endswith(": [a gzip body, not shown]"), raised.value


@pytest.mark.parametrize(
    ("content_type", "shown"),
    [
        ("application/json; charset=utf-16", '{"error": "unknown hook ***"}'),
        ("application/json", "[a body that is not text, not shown]"),
    ],
)
def test_a_body_in_another_charset_is_masked_in_it_or_not_shown(
    content_type: str, shown: str
) -> None:
    """Read as UTF-8, a UTF-16 body that echoed the capability URL's path spelled it with a
    NUL between its letters: no mask matched it, and the error showed it letter by letter."""
    hook = "/hooks/T0ABCDEFG/B0HIJKLMN/zyxwvutsrqponmlkjihgfedc"
    body = ('{"error": "unknown hook ' + hook + '"}').encode("utf-16")
    head = b"HTTP/1.1 422 Unprocessable\r\nContent-Type: " + content_type.encode() + b"\r\n"
    answer = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    with raw_server(lambda conn: conn.sendall(answer)) as url:
        with pytest.raises(PermanentDownstreamError) as raised:
            HttpAction(url.replace("/fulfil", hook), 5.0, replay_safe=False)(CALL)
    assert str(raised.value).endswith(": " + shown), raised.value
    assert "zyxwvuts" not in str(raised.value).replace(" ", "")
