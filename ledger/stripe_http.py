"""The HTTP session every stripe-python client of the service uses: no redirect followed, and
a total deadline on each request.

requests (through urllib3) bounds each socket read, not the request: an answer trickled a
byte at a time, each within the timeout, kept a worker reading a purchase for as long as
the sender liked, and then the next worker the sweeper gave the payment to. Here a timer
shuts the request's socket down once the deadline has passed; the read that waits on it
fails at once, and stripe-python raises the APIConnectionError of an unanswered request.
It works in any thread (a worker's slots) and in a gevent-patched web process alike.
"""

import socket
import threading
from typing import Any, cast

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection
from urllib3.connectionpool import HTTPConnectionPool


class StripeSession(requests.Session):
    """A session that neither follows nor prepares a redirect (requests follows a GET's 3xx
    by default): the 3xx itself comes back, and stripe-python raises it as the error it is,
    so the key never goes where a Location points. Each request ends by ``total_s``."""

    def __init__(self, total_s: float) -> None:
        super().__init__()
        self.total_s = total_s
        for prefix in ("https://", "http://"):
            self.mount(prefix, DeadlineAdapter())

    def resolve_redirects(self, *args: Any, **kwargs: Any) -> Any:
        yield from ()

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        deadline = Deadline(self.total_s)
        _current.deadline = deadline
        try:
            with deadline:
                return super().request(*args, **kwargs)  # the body read too (not streamed)
        finally:
            _current.deadline = None


_current = threading.local()


class Deadline:
    """Shuts down the sockets its request used once ``seconds`` pass."""

    def __init__(self, seconds: float) -> None:
        self.timer = threading.Timer(seconds, self.cut)
        self.timer.daemon = True
        self.sockets: list[Any] = []
        self.lock = threading.Lock()
        self.passed = False

    def __enter__(self) -> "Deadline":
        self.timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timer.cancel()

    def watch(self, sock: Any) -> None:
        """The socket a request was sent on, once it is connected. The socket itself, not
        its connection: a response that closes its connection takes the socket over."""
        if sock is None:
            return
        with self.lock:
            self.sockets.append(sock)
            if not self.passed:
                return
        _shut(sock)  # it passed while the connection was being made

    def cut(self) -> None:
        with self.lock:
            self.passed = True
            sockets = list(self.sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: Any) -> None:
    # TLS through a TLS proxy: urllib3's SSLTransport over the proxy's socket
    raw = sock if isinstance(sock, socket.socket) else getattr(sock, "socket", None)
    if raw is None:
        return
    try:
        # socket.socket's own: an SSLSocket's drops its TLS state under the reading thread
        socket.socket.shutdown(raw, socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


_watched: dict[type, type] = {}


def _watched_class(base: type[HTTPConnection]) -> type[HTTPConnection]:
    """``base`` (urllib3's HTTP or HTTPS connection) telling the thread's deadline the
    socket of each request it has sent, before the answer is read."""
    if base not in _watched:

        def request(self: HTTPConnection, *args: Any, **kwargs: Any) -> None:
            base.request(self, *args, **kwargs)  # connects first if it must
            deadline = getattr(_current, "deadline", None)
            if deadline is not None:
                deadline.watch(self.sock)

        _watched[base] = type(f"Deadlined{base.__name__}", (base,), {"request": request})
    return _watched[base]


class DeadlineAdapter(HTTPAdapter):
    """requests' adapter whose connection pools make watched connections (proxied too)."""

    def get_connection_with_tls_context(self, *args: Any, **kwargs: Any) -> Any:
        pool = cast(HTTPConnectionPool, super().get_connection_with_tls_context(*args, **kwargs))
        if pool.ConnectionCls not in _watched.values():
            pool.ConnectionCls = _watched_class(cast(type[HTTPConnection], pool.ConnectionCls))
        return pool
