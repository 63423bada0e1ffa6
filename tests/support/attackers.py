"""Hostile connections held open against a server, from one thread with non-blocking sockets.

``SlowValid``: each connection sends a whole header block with a small ``Content-Length``,
then one body byte every ``pace`` seconds; once answered it starts its next slow request
on the same connection at once, and reconnects at once when the server closes it.
``Idle``: each connection never sends a byte and reconnects when closed. Both bind a
source address (any of 127.0.0.0/8 is loopback on Linux), so the server can tell them from
the deliveries sent from 127.0.0.1. Bounded: ``count`` connections, for as long as the
context manager runs.
"""

import errno
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.helpers import in_background

BODY = b'{"a": 1}'
HEAD = (
    b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(BODY)
)


class Connection:
    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.sent, self.received = sock, -1, b""
        self.due = 0.0
        """When its next byte is due (monotonic); -1 sent: the head is not sent yet."""


class Attack:
    """``count`` connections to ``port`` from ``source``; ``slow``: send slow valid requests,
    else stay idle."""

    def __init__(self, port: int, count: int, source: str, slow: bool, pace: float = 1.0):
        self.port, self.count, self.source, self.slow, self.pace = port, count, source, slow, pace
        self.selector = selectors.DefaultSelector()
        self.connections: dict[socket.socket, Connection] = {}
        self.statuses: Counter = Counter()
        self.opened = self.body_bytes = 0
        self.kept_alive_after_rejection = 0
        """4xx answers that left the connection open (Connection: keep-alive)."""
        self.window, self.opened_in_window = 0.0, 0
        """At most ``count`` new connections a second: a bounded attacker."""
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def connect(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.bind((self.source, 0))
        if sock.connect_ex(("127.0.0.1", self.port)) not in (0, errno.EINPROGRESS):
            sock.close()
            return
        conn = Connection(sock)
        conn.due = time.monotonic()  # the head goes as soon as the connection is writable
        self.connections[sock] = conn
        self.selector.register(sock, selectors.EVENT_READ)
        self.opened += 1

    def drop(self, sock: socket.socket) -> None:
        self.selector.unregister(sock)
        del self.connections[sock]
        sock.close()

    def send_due(self, now: float) -> None:
        if not self.slow:
            return
        for sock, conn in list(self.connections.items()):
            if conn.due > now or conn.sent >= len(BODY):
                continue
            data = HEAD + BODY[:1] if conn.sent < 0 else BODY[conn.sent : conn.sent + 1]
            try:
                sock.send(data)
            except BlockingIOError:  # not connected yet (still in the server's backlog)
                continue
            except OSError:
                self.drop(sock)
                continue
            conn.sent = 1 if conn.sent < 0 else conn.sent + 1
            self.body_bytes += 1
            conn.due = now + self.pace

    def read(self, sock: socket.socket) -> None:
        conn = self.connections[sock]
        try:
            piece = sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            piece = b""
        if not piece:
            self.drop(sock)
            return
        conn.received += piece
        head, sep, rest = conn.received.partition(b"\r\n\r\n")
        if not sep:
            return
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        if len(rest) < length:
            return
        status = head.split(b" ", 2)[1].decode()
        with self.lock:
            self.statuses[status] += 1
            if status.startswith("4") and b"connection: close" not in head.lower():
                self.kept_alive_after_rejection += 1
        conn.received, conn.sent, conn.due = rest[length:], -1, time.monotonic()

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.monotonic()
            if now - self.window >= 1.0:
                self.window, self.opened_in_window = now, 0
            while len(self.connections) < self.count and self.opened_in_window < self.count:
                self.connect()
                self.opened_in_window += 1
            self.send_due(now)
            for key, _ in self.selector.select(timeout=0.05):
                if key.fileobj in self.connections:
                    self.read(key.fileobj)  # type: ignore[arg-type]

    @contextmanager
    def running(self) -> Iterator["Attack"]:
        try:
            with in_background(self.run, self.stop):
                yield self
        finally:
            for sock in list(self.connections):
                self.selector.unregister(sock)
                sock.close()
            self.connections.clear()
            self.selector.close()


PIPELINED = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


class Pipelining:
    """``count`` connections to ``port`` from ``source`` that pipeline requests as fast as
    the server takes them and never read an answer, each reconnecting at once when the
    server closes it: a client that keeps its connections busy in the answer's write."""

    def __init__(self, port: int, count: int, source: str) -> None:
        self.port, self.count, self.source = port, count, source
        self.selector = selectors.DefaultSelector()
        self.connections: set[socket.socket] = set()
        self.opened = self.sent = 0
        self.stop = threading.Event()

    def connect(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.bind((self.source, 0))
        if sock.connect_ex(("127.0.0.1", self.port)) not in (0, errno.EINPROGRESS):
            sock.close()
            return
        self.connections.add(sock)
        self.selector.register(sock, selectors.EVENT_WRITE)
        self.opened += 1

    def drop(self, sock: socket.socket) -> None:
        self.selector.unregister(sock)
        self.connections.discard(sock)
        sock.close()

    def run(self) -> None:
        burst = PIPELINED * 64
        while not self.stop.is_set():
            while len(self.connections) < self.count:
                self.connect()
            for key, _ in self.selector.select(timeout=0.05):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    self.sent += sock.send(burst) // len(PIPELINED)
                except BlockingIOError:
                    continue
                except OSError:  # closed by the server (after its last request, or shed)
                    self.drop(sock)

    @contextmanager
    def running(self) -> Iterator["Pipelining"]:
        try:
            with in_background(self.run, self.stop):
                yield self
        finally:
            for sock in list(self.connections):
                self.drop(sock)
            self.selector.close()
