"""The web worker: gunicorn's gevent worker, made to hold on its own with no proxy in front.

Every connection is a greenlet (``worker_connections`` per process are served, set in
gunicorn.conf.py), so a slow client holds a greenlet, never one of a few threads. gunicorn
already bounds a request's line and headers by its keep-alive timeout; here the body is read
whole within BODY_READ_TIMEOUT before the app runs, and HTTP that gunicorn's parser refuses
is answered with the app's own counted JSON rejection instead of an HTML page. No client
keeps its slots for long (webhook/connections.py): any 4xx closes its connection, a
connection carries a bounded number of requests for a bounded time, an answer must be taken
within ANSWER_WRITE_TIMEOUT, one address holds at most CONNECTIONS_PER_ADDRESS, and at the
cap the oldest idle, slow or unread connection gives way to a new one. A connection whose
client pipelines requests waits its turn between them, as a new one does. Why gevent, and
the capacity: docs/WEB.md, "Slow and malformed HTTP".
"""

import io
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import gevent
import orjson
from gunicorn import util
from gunicorn.http import errors
from gunicorn.workers.ggevent import GeventWorker

from webhook.connections import APP, IDLE, WRITE, Connections, Limits, headroom
from webhook.exceptions import Rejected
from webhook.request_head import RefusedHead, parse_rejection, refused_head

if TYPE_CHECKING:
    from flask import Flask, Response

UNREAD = "webhook_body_unread"
"""Marks a gunicorn request body left (partly) unread: its connection is then closed, as
the rest of the body would otherwise be parsed as the next request."""

SHED = Rejected(
    "connection_shed", 408, "the body was too slow while the server needed the connection"
)
TOO_MANY = Rejected("too_many_connections", 429, "too many connections from this address")


class BodyTimeout(Exception):
    """The body was not complete within BODY_READ_TIMEOUT."""


def read_whole(stream: Any, declared: int, limit: int, seconds: float) -> bytes:
    """Up to ``limit`` bytes of a body that must be complete within ``seconds``."""
    try:
        with gevent.Timeout(seconds, BodyTimeout):
            body: bytes = stream.read(limit)
    except BodyTimeout as exc:
        raise Rejected("body_timeout", 408, f"body not complete within {seconds:g} s") from exc
    except errors.NoMoreData as exc:
        raise Rejected("incomplete_body", 400, "the connection ended inside the body") from exc
    except errors.ParseException as exc:  # chunked framing or trailers
        raise Rejected("malformed_body", 400, str(exc)[:200]) from exc
    if len(body) < declared:
        detail = f"the connection ended after {len(body)} of {declared} bytes"
        raise Rejected("incomplete_body", 400, detail)
    return body


def raw_answer(status: int, payload: dict[str, object]) -> bytes:
    """A whole HTTP response, for a request too malformed to reach the app."""
    body = orjson.dumps(payload)
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class WholeBodies:
    """WSGI middleware: the app runs once the body is complete, else the request is refused;
    a 4xx answer closes its connection."""

    def __init__(
        self,
        app: "Flask",
        reject: Callable[[Rejected, bytes], "Response"],
        connections: Connections,
    ) -> None:
        self.app, self.reject, self.connections = app, reject, connections
        settings = app.extensions["settings"]  # as webhook/store.py keeps them
        self.limit, self.seconds = settings.MAX_BODY_BYTES, settings.BODY_READ_TIMEOUT
        self.write_seconds: float = settings.ANSWER_WRITE_TIMEOUT
        self.deadlines: dict[Any, Any] = {}
        """The write deadline of each connection whose answer is being written."""

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        key = gevent.getcurrent()

        def start(status: str, headers: list, exc_info: Any = None) -> Callable:
            if status[:1] == "4":  # a Stripe sender never needs the connection after a 4xx
                self.connections.close_after(key)
            return start_response(status, headers, exc_info)

        answer = self.whole(environ, start)
        # gunicorn writes the answer once this returns: from here the connection may be
        # shed, and is at its deadline (a client that never reads would block it for ever).
        self.connections.enter(key, WRITE)
        deadline = gevent.get_hub().loop.timer(self.write_seconds)
        deadline.start(self.connections.write_expired, key)
        self.deadlines[key] = deadline
        return answer

    def written(self, key: Any) -> None:
        """The answer is written (or the request ended another way): no deadline."""
        deadline = self.deadlines.pop(key, None)
        if deadline is not None:
            deadline.close()

    def whole(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        stream = environ["wsgi.input"]
        declared = int(environ.get("CONTENT_LENGTH") or 0)
        if declared > self.limit:  # the app answers 413 without reading it
            setattr(stream, UNREAD, True)
            return self.app(environ, start_response)
        try:
            body = read_whole(stream, declared, self.limit + 1, self.seconds)
        except Rejected as rejected:
            setattr(stream, UNREAD, True)
            conn = self.connections.enter(gevent.getcurrent(), APP)
            with self.app.request_context(environ):
                response = self.reject(SHED if conn and conn.shed else rejected, b"")
            return response(environ, start_response)
        self.connections.enter(gevent.getcurrent(), APP)  # never shed from here on
        if len(body) > self.limit:  # chunked and over the limit: the app answers 413
            setattr(stream, UNREAD, True)
        environ["wsgi.input"] = io.BytesIO(body)
        return self.app(environ, start_response)


class Worker(GeventWorker):
    """gunicorn's gevent worker: whole bodies under a deadline, JSON for malformed HTTP, and
    connections that give way (webhook/connections.py)."""

    wsgi: Any  # set by gunicorn's load_wsgi: our Flask app, then the middleware around it

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # gevent's pool holds the cap plus headroom: a new connection is accepted, and the
        # oldest idle or slow one shed for it, instead of waiting in the listen backlog.
        self.cap: int = self.cfg.worker_connections
        self.worker_connections = self.cap + headroom(self.cap)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        # Only here, in the worker once gevent has patched the standard library: the master
        # imports this module (to find the class) before it forks.
        from webhook import receiver, store
        from webhook.redis_readiness import poll_without_the_hub

        poll_without_the_hub()
        self.flask, self.receiver, self.store = self.wsgi, receiver, store
        settings = self.flask.extensions["settings"]
        self.connections = Connections(
            Limits(
                self.cap,
                settings.CONNECTIONS_PER_ADDRESS,
                settings.REQUESTS_PER_CONNECTION,
                settings.CONNECTION_LIFETIME,
                settings.TRUSTED_PROXIES,
                settings.CONNECTIONS_PER_ADDRESS_IPV6_PREFIX,
            )
        )
        self.wsgi = WholeBodies(self.flask, receiver.reject, self.connections)

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        key = gevent.getcurrent()
        address = str(addr[0]) if isinstance(addr, tuple) else ""
        if self.connections.open(key, client, address) is None:
            self.refuse(client, address)
            return
        try:
            super().handle(listener, client, addr)
        finally:
            self.connections.close(key)

    def refuse(self, client: Any, address: str) -> None:
        """Answer 429 to a connection over its address's cap, counted, and close it at once
        (no lingering: it would hold the slot the cap is there to keep)."""
        try:
            self.answer(client, TOO_MANY, address, None)
        finally:
            util.close(client)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> None:
        refused = refused_head(req.headers)
        if refused is not None:  # answered and counted by handle_error, as a parse error
            raise RefusedHead(refused)
        key = gevent.getcurrent()
        conn = self.connections.start_request(key, req)
        if conn is not None and conn.requests > 1:
            # Pipelined requests are parsed from a buffer and their answers written without
            # blocking, so without this a client pipelining hundreds of requests would hold
            # the process for all of them while every other connection waits.
            gevent.sleep(0)
        try:
            super().handle_request(listener_name, req, sock, addr)
        except StopIteration:  # how gunicorn's async worker closes a connection
            close_unread(req, sock)
            raise
        finally:
            self.wsgi.written(key)
            self.connections.enter(key, IDLE)
        if close_unread(req, sock):
            raise StopIteration()

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        rejected = parse_rejection(exc)
        if rejected is None:
            super().handle_error(req, client, addr, exc)
            return
        method = getattr(getattr(exc, "req", None) or req, "method", None)
        self.answer(client, rejected, addr[0] if addr else None, method)
        util.close_graceful(client)  # see close_unread

    def answer(self, client: Any, rejected: Rejected, remote: str | None, method: Any) -> None:
        """Count a rejection made outside the app and send its JSON answer."""
        ledger = self.store.ledger_of(self.flask)
        self.receiver.count_rejection(ledger, rejected, 0, b"", remote, method)
        answer = raw_answer(rejected.status, self.receiver.rejection_payload(rejected))
        try:
            util.write_nonblock(client, answer)
        except OSError:
            self.log.debug("client gone before its rejection was sent")


def close_unread(req: Any, sock: Any) -> bool:
    """Close the connection if its request body was left unread; True if it was closed."""
    if not getattr(req.body, UNREAD, False):
        return False
    # Lingering (half-close, drain a little, close): closing with unread bytes would make the
    # kernel reset the connection, and the client could lose the answer already sent.
    util.close_graceful(sock)
    return True
