"""A downstream HTTP service for tests: counts every call, never dedupes, scripted answers."""

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class CountingDownstream:
    """Answers each call with the next status of ``script`` (then ``default``)."""

    def __init__(
        self,
        script: list[int] | None = None,
        default: int = 200,
        delays: list[float] | None = None,
        trickles: list[float] | None = None,
    ) -> None:
        self.script = list(script or [])
        self.delays = list(delays or [])
        self.trickles = list(trickles or [])  # per call: seconds to trickle the body over
        self.in_flight: Counter[str] = Counter()
        self.most_in_flight: Counter[str] = Counter()  # > 1: two calls for one payment overlapped
        self.default = default
        self.calls: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.idempotency_keys: list[str] = []
        self.gate: threading.Event | None = None
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/fulfil"

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
                    delay = outer.delays.pop(0) if outer.delays else 0.0
                    trickle = outer.trickles.pop(0) if outer.trickles else 0.0
                    pk = body["payment_key"]
                    outer.in_flight[pk] += 1
                    outer.most_in_flight[pk] = max(outer.most_in_flight[pk], outer.in_flight[pk])
                try:
                    if first and outer.gate is not None:
                        outer.gate.wait(60)
                    time.sleep(delay)
                    self.answer(status, trickle)
                except OSError:  # the caller gave up (its deadline): the call still happened
                    pass
                finally:
                    with outer.lock:
                        outer.in_flight[pk] -= 1

            def answer(self, status: int, trickle: float) -> None:
                payload = json.dumps({"order": f"ord_{len(outer.bodies)}"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if not trickle:
                    self.wfile.write(payload)
                    return
                for byte in payload:  # headers at once, then the body a byte at a time
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(trickle / len(payload))

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
