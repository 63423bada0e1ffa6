"""A downstream HTTP service for tests: counts every call, never dedupes, scripted answers;
the test switches it down (an answer for every call, or refused connections) and up again,
or has it redirect every call (its other pages answer GET and HEAD with scripted statuses)."""

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.processes import serving_thread


class CountingDownstream:
    """Answers each call with the next status of ``script`` (then ``default``)."""

    def __init__(
        self,
        script: list[int] | None = None,
        default: int = 200,
        delays: list[float] | None = None,
        trickles: list[float] | None = None,
        head_trickles: list[float] | None = None,
    ) -> None:
        self.script = list(script or [])
        self.delays = list(delays or [])
        self.trickles = list(trickles or [])  # per call: seconds to trickle the body over
        self.head_trickles = list(
            head_trickles or []
        )  # per call: the whole answer's, status line first
        self.in_flight: Counter[str] = Counter()
        self.most_in_flight: Counter[str] = Counter()  # > 1: two calls for one payment overlapped
        self.most_at_once = 0  # the most calls in flight at one time, all payments together
        self.default = default
        self.calls: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.idempotency_keys: list[str] = []
        self.gate: threading.Event | None = None
        self.lock = threading.Lock()
        self.down: tuple[int, dict[str, str]] | None = None  # while set: every call's answer
        self.refusing: set[str] = set()  # payment keys answered 400 whatever else
        self.quota: dict[str, int] = {}  # payment keys answered 429 with this Retry-After
        self.answered: list[tuple[float, str, int]] = []  # (arrival time, payment, status)
        self.successes: Counter[str] = Counter()
        self.redirect: tuple[int, str] | None = None  # while set: every POST's status, Location
        self.pages: list[int] = []  # the statuses GET and HEAD answer in turn, then 200
        self.visits: list[tuple[str, str]] = []  # every GET and HEAD: (method, path)
        self.server = self._serve(0)
        self.port = self.server.server_address[1]
        self.thread = serving_thread(self.server)

    def _serve(self, port: int) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        server.daemon_threads = True
        return server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/fulfil"

    def go_down(self, status: int = 503, retry_after: int | None = None) -> None:
        """Answer every call with ``status`` (and a Retry-After) until :meth:`come_back`."""
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        with self.lock:
            self.down = (status, headers)

    def come_back(self) -> None:
        with self.lock:
            self.down = None

    def refuse_connections(self) -> None:
        """Close the listening socket: every connection is refused until :meth:`listen`."""
        self.server.shutdown()
        self.server.server_close()

    def listen(self) -> None:
        """Listen again on the same port after :meth:`refuse_connections`."""
        self.server = self._serve(self.port)
        self.thread = serving_thread(self.server)
        self.thread.start()

    def calls_between(self, start: float, end: float) -> list[tuple[float, str, int]]:
        with self.lock:
            return [a for a in self.answered if start <= a[0] <= end]

    def hold_first_call(self) -> threading.Event:
        """The first call blocks until the returned event is set."""
        self.gate = threading.Event()
        return self.gate

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    first = not outer.bodies
                    outer.calls[body["payment_key"]] += 1
                    outer.bodies.append(body)
                    outer.idempotency_keys.append(self.headers.get("Idempotency-Key", ""))
                    status = outer.script.pop(0) if outer.script else outer.default
                    headers = {}
                    if outer.down is not None:
                        status, headers = outer.down
                    elif body["payment_key"] in outer.refusing:
                        status = 400
                    elif body["payment_key"] in outer.quota:
                        status = 429
                        headers = {"Retry-After": str(outer.quota[body["payment_key"]])}
                    if outer.redirect is not None:
                        status, headers = outer.redirect[0], {"Location": outer.redirect[1]}
                    outer.answered.append((time.time(), body["payment_key"], status))
                    if 200 <= status < 300:
                        outer.successes[body["payment_key"]] += 1
                    delay = outer.delays.pop(0) if outer.delays else 0.0
                    trickle = outer.trickles.pop(0) if outer.trickles else 0.0
                    head_trickle = outer.head_trickles.pop(0) if outer.head_trickles else 0.0
                    pk = body["payment_key"]
                    outer.in_flight[pk] += 1
                    outer.most_in_flight[pk] = max(outer.most_in_flight[pk], outer.in_flight[pk])
                    outer.most_at_once = max(outer.most_at_once, sum(outer.in_flight.values()))
                try:
                    if first and outer.gate is not None:
                        outer.gate.wait(60)
                    time.sleep(delay)
                    if head_trickle:
                        self.trickle_all(status, head_trickle)
                    else:
                        self.answer(status, trickle, headers)
                except OSError:  # the caller gave up (its deadline): the call still happened
                    pass
                finally:
                    with outer.lock:
                        outer.in_flight[pk] -= 1

            def do_GET(self) -> None:
                self.visited()

            def do_HEAD(self) -> None:
                self.visited()

            def visited(self) -> None:
                with outer.lock:
                    outer.visits.append((self.command, self.path))
                    status = outer.pages.pop(0) if outer.pages else 200
                    headers = {}
                    if self.command == "HEAD" and outer.redirect is not None:
                        status, headers = outer.redirect[0], {"Location": outer.redirect[1]}
                self.answer(status, 0.0, headers)

            def answer(self, status: int, trickle: float, headers: dict[str, str]) -> None:
                payload = json.dumps({"order": f"ord_{len(outer.bodies)}"}).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if not trickle:
                    self.wfile.write(payload)
                    return
                for byte in payload:  # headers at once, then the body a byte at a time
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(trickle / len(payload))

            def trickle_all(self, status: int, seconds: float) -> None:
                """The whole answer a byte at a time over ``seconds``, its status line too."""
                payload = json.dumps({"order": f"ord_{len(outer.bodies)}"}).encode()
                head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(payload)}\r\n\r\n"
                whole = head.encode() + payload
                for byte in whole:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(seconds / len(whole))

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def __enter__(self) -> "CountingDownstream":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.gate is not None:
            self.gate.set()
        self.server.shutdown()
        self.server.server_close()
