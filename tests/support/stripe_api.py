"""A local stand-in for Stripe's ``GET /v1/events``, in Stripe's list format, so the real
stripe-python client can be pointed at it with STRIPE_API_BASE (loopback only).

It keeps what the Events API needs for reconcile: newest first, ``limit`` (10 by default, at
most 100), ``starting_after``, ``has_more``, ``created[gte]`` and ``delivery_success``, a
bearer key, and Stripe's error shape for a wrong key.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.processes import serving_thread

API_KEY = "rk_test_reconcile_read_events_only"


class EventsApi:
    """Events Stripe has, and which of them it delivered to every endpoint."""

    def __init__(self, key: str = API_KEY) -> None:
        self.key = key
        self.events: list[dict[str, Any]] = []
        self.delivered: set[str] = set()
        self.requests: list[dict[str, list[str]]] = []
        self.gate = threading.Event()
        """Cleared: requests are counted, then answered once it is set (ordering tests)."""
        self.gate.set()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = serving_thread(self.server)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, event: dict[str, Any], delivered: bool = False) -> None:
        self.events.append(event)
        if delivered:
            self.delivered.add(event["id"])

    def start(self) -> "EventsApi":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def page(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """One page of the list, as Stripe answers it."""
        self.requests.append(query)
        gte = int(query.get("created[gte]", ["0"])[0])
        found = sorted(
            (e for e in self.events if e["created"] >= gte),
            key=lambda e: (e["created"], e["id"]),
            reverse=True,
        )
        if query.get("delivery_success") == ["false"]:
            found = [e for e in found if e["id"] not in self.delivered]
        if "starting_after" in query:
            ids = [e["id"] for e in found]
            found = found[ids.index(query["starting_after"][0]) + 1 :]
        limit = min(100, int(query.get("limit", ["10"])[0]))
        return {
            "object": "list",
            "url": "/v1/events",
            "has_more": len(found) > limit,
            "data": found[:limit],
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                url = urlsplit(self.path)
                if self.headers.get("Authorization") != f"Bearer {api.key}":
                    error = {"type": "invalid_request_error", "message": "Invalid API Key provided"}
                    return self.answer(401, {"error": error})
                if url.path != "/v1/events":
                    return self.answer(404, {"error": {"type": "invalid_request_error"}})
                page = api.page(parse_qs(url.query))
                api.gate.wait(timeout=60)
                return self.answer(200, page)

            def answer(self, status: int, payload: dict[str, Any]) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Request-Id", "req_local")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler
