"""One POST to the endpoint, trusting nothing the server does: no redirect is followed (a
3xx is an answer like any other, not acknowledged, its ``Location`` kept for the report),
the whole request has one deadline (connect, send, headers and body together, not per
read: a server trickling its answer is cut off), and at most ``MAX_BODY_BYTES`` of an
answer are read (the connection is dropped after a longer one).

Standard library ``http.client`` on a kept-alive connection per sending thread: it never
follows redirects and never goes through a proxy named in the environment.
"""

import http.client
import json
import select
import socket
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from ledger.redact import mask_url

MAX_BODY_BYTES = 64 * 1024
"""Most bytes of an answer read: the service answers a few hundred."""
SHOWN_CHARS = 200
"""Most characters of a ``Location`` kept for the report."""


@dataclass(frozen=True)
class Reply:
    status: int
    """HTTP status, 0 when no answer came (``error`` says why)."""
    reason: str = ""
    """The ``error`` of the service's JSON answer (``signature_mismatch``), if any."""
    location: str = ""
    """A redirect's ``Location``, shortened: reported, never followed."""
    error: str = ""
    """Why no answer came: ``deadline`` or the exception's class."""


class Poster:
    """POSTs to one URL on one kept-alive connection, each request within ``deadline``
    seconds in all. Not thread-safe: one per sending thread."""

    def __init__(self, url: str, deadline: float) -> None:
        try:
            parts = urlsplit(url)
            host, port = parts.hostname or "", parts.port
        except ValueError:  # its words quote the port urllib read: maybe a password's start
            parts, host, port = urlsplit(""), "", None
        if parts.scheme not in ("http", "https") or not host:
            raise ValueError(f"not an http(s) URL with a host and a port 0-65535: {mask_url(url)}")
        self.https = parts.scheme == "https"
        self.host, self.port = host, port
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.deadline = deadline
        self.conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self.conn is not None and _dropped(self.conn):
            self.close()
        if self.conn is None:
            kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            self.conn = kind(self.host, self.port, timeout=self.deadline)
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def post(self, body: bytes, headers: dict[str, str]) -> Reply:
        conn = self._connection()
        cut = threading.Event()
        watchdog = threading.Timer(self.deadline, _cut_off, (conn, cut))
        watchdog.daemon = True
        watchdog.start()
        try:
            reply = self._exchange(conn, body, headers)
        except (OSError, http.client.HTTPException) as exc:
            reply = Reply(0, error=type(exc).__name__)
        finally:
            watchdog.cancel()
        if cut.is_set() or reply.status == 0:
            # Cut off, an answer is not whole even when it parsed (http.client takes the
            # end of the stream for the end of the headers): no answer, as for Stripe.
            self.close()
            return Reply(0, error="deadline") if cut.is_set() else reply
        return reply

    def _exchange(
        self, conn: http.client.HTTPConnection, body: bytes, headers: dict[str, str]
    ) -> Reply:
        conn.request("POST", self.target, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read(MAX_BODY_BYTES)
        if not response.isclosed():  # more than MAX_BODY_BYTES: not read, not reused
            self.close()
        location = response.getheader("Location", "") if 300 <= response.status < 400 else ""
        return Reply(response.status, _reason(data), location[:SHOWN_CHARS])


def _cut_off(conn: http.client.HTTPConnection, cut: threading.Event) -> None:
    """The deadline passed: end the exchange whatever it is waiting for."""
    cut.set()
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _reason(data: bytes) -> str:
    """The ``error`` of a JSON answer such as ``{"error": "signature_mismatch"}``, else ''."""
    try:
        answer = json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the stack
        return ""
    reason = answer.get("error") if isinstance(answer, dict) else None
    return reason[:SHOWN_CHARS] if isinstance(reason, str) else ""


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether the server closed this idle kept-alive connection (it is readable: EOF)."""
    if conn.sock is None:
        return False
    poller = select.poll()  # not select.select: any file descriptor number
    poller.register(conn.sock, select.POLLIN)
    return bool(poller.poll(0))
