"""An HTTP downstream that applies each call's purchase (an effect per payment key) and
honours ``Idempotency-Key`` (a key seen before answers 200 and applies nothing) or, with
``honours=False``, ignores it. ``GET /effects/<payment key>`` answers the effects; the
prover's probe (:func:`effects`, ``--effects``) asks it there."""

import json
import os
import threading
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.processes import serving_thread

URL_ENV = "KEYED_DOWNSTREAM_URL"
"""Where :func:`effects` finds the downstream (the prover runs in another process)."""


class KeyedDownstream:
    def __init__(self, honours: bool) -> None:
        self.honours = honours
        self.effects: Counter[str] = Counter()
        self.keys: set[str] = set()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = serving_thread(self.server)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key = self.headers.get("Idempotency-Key", "")
                with outer.lock:
                    if not (outer.honours and key in outer.keys):
                        outer.effects[body["payment_key"]] += 1
                    outer.keys.add(key)
                self.answer(b'{"ok": true}')

            def do_GET(self) -> None:
                with outer.lock:
                    found = outer.effects[self.path.rsplit("/", 1)[-1]]
                self.answer(str(found).encode())

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.end_headers()

            def answer(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def __enter__(self) -> "KeyedDownstream":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def effects(payment_key: str) -> int:
    """The prover's probe: the effects the downstream at KEYED_DOWNSTREAM_URL applied."""
    with urllib.request.urlopen(f"{os.environ[URL_ENV]}/effects/{payment_key}", timeout=10) as r:
        return int(r.read())
