"""A local stand-in for Stripe's API, in Stripe's list format, so the real stripe-python
client can be pointed at it with STRIPE_API_BASE (loopback only).

It keeps what the Events API needs for reconcile (``GET /v1/events``): newest first,
``limit`` (10 by default, at most 100), ``starting_after``, ``has_more``, ``created[gte]``
and ``delivery_success``, a bearer key, and Stripe's error shape for a wrong key. And what a
purchase needs of Checkout: ``GET /v1/checkout/sessions/{id}``, its ``/line_items`` over as
many pages as ``limit`` makes (a retrieved session expands its PaymentIntent and its
first 10 line items when asked), and ``GET /v1/checkout/sessions?payment_intent=``; and
``GET /v1/payment_intents/{id}`` (``intents``, for a payment a thin event paid); and an
invoice's lines, ``GET /v1/invoices/{id}/lines`` over as many pages as ``limit`` makes
(``add_invoice_lines``; ``GET /v1/invoices`` lists none, for a worker's key check). It can
answer 429 or 500 to those for a while, and 403 (a key without that permission). Sessions are
added in the test's process (``add_session``) or over HTTP (``PUT
/standin/checkout/sessions/{id}``, the replay's ``--serve-sessions``). And the account's
webhook endpoints (``GET /v1/webhook_endpoints``, ``limit`` and ``starting_after``, for
``webhook-ledger check-endpoint``; 403 too when ``forbidden``). ``redirect_to`` set, it
answers every GET with a redirect there instead (the key must not follow it).
``scripts/stripe_api_standin.py`` runs it on its own, for the replay's ``--serve-sessions``.
"""

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.processes import serving_thread

API_KEY = "rk_test_reconcile_read_events_only"


class EventsApi:
    """Events Stripe has, and which of them it delivered to every endpoint."""

    def __init__(self, key: str = API_KEY, port: int = 0) -> None:
        """Listening on 127.0.0.1 at ``port`` (0: a free one) once started."""
        self.key = key
        self.events: list[dict[str, Any]] = []
        self.delivered: set[str] = set()
        self.requests: list[dict[str, list[str]]] = []
        self.gate = threading.Event()
        """Cleared: requests are counted, then answered once it is set (ordering tests)."""
        self.gate.set()
        self.sessions: dict[str, dict[str, Any]] = {}
        self.intents: dict[str, dict[str, Any]] = {}
        """PaymentIntents a session's ``expand[]=payment_intent`` gives (else its id stays)."""
        self.line_items: dict[str, list[dict[str, Any]]] = {}
        self.invoice_lines: dict[str, list[dict[str, Any]]] = {}
        self.checkout_requests: Counter[str] = Counter()
        """Requests for Checkout Sessions, PaymentIntents and Invoices by path, the failed ones
        included."""
        self.failing: tuple[int, float] | None = None
        self.fails_until = 0.0
        self.forbidden = False
        self.webhook_endpoints: list[dict[str, Any]] = []
        self.endpoint_pages = 0
        self.redirect_to = ""
        """Set: every GET answers 302 to this base URL plus the request's path."""
        self.requests_seen = 0
        """GETs answered, whatever they were."""
        self.trickle_s = 0.0
        """Set: every answer's body goes out one byte per this many seconds (each read of
        the client's well within its timeout)."""
        self.trickled: list[int] = []
        """Per trickled answer, the bytes of its body sent before the client hung up."""
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.thread = serving_thread(self.server)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, event: dict[str, Any], delivered: bool = False) -> None:
        self.events.append(event)
        if delivered:
            self.delivered.add(event["id"])

    def add_session(self, session: dict[str, Any], items: list[dict[str, Any]]) -> None:
        """A Checkout Session and its line items (each needs an ``id``)."""
        self.sessions[session["id"]] = session
        self.line_items[session["id"]] = items

    def add_invoice_lines(self, invoice_id: str, lines: list[dict[str, Any]]) -> None:
        """Every line of an invoice (each needs an ``id``), as its lines endpoint lists them."""
        self.invoice_lines[invoice_id] = lines

    def invoice(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """``GET /v1/invoices/{id}/lines``: one page of its lines; ``/v1/invoices``: none."""
        if path == "/v1/invoices":
            return 200, {"object": "list", "url": path, "has_more": False, "data": []}
        found = self.invoice_lines.get(path.removeprefix("/v1/invoices/").removesuffix("/lines"))
        if found is None or not path.endswith("/lines"):
            return 404, {"error": {"type": "invalid_request_error", "code": "resource_missing"}}
        return 200, list_page(found, query, path)

    def add_endpoint(
        self, url: str, enabled_events: list[str], status: str = "enabled"
    ) -> dict[str, Any]:
        """A webhook endpoint as Stripe's API shows it (its secret only on creation)."""
        endpoint = {
            "id": f"we_standin{len(self.webhook_endpoints):04d}",
            "object": "webhook_endpoint",
            "api_version": None,
            "enabled_events": enabled_events,
            "livemode": False,
            "status": status,
            "url": url,
        }
        self.webhook_endpoints.append(endpoint)
        return endpoint

    def endpoint_page(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """One page of the webhook endpoints, in Stripe's list format."""
        self.endpoint_pages += 1
        return list_page(self.webhook_endpoints, query, "/v1/webhook_endpoints")

    def fail_for(self, status: int, seconds: float) -> None:
        """Answer every request for a Stripe object (Checkout, PaymentIntents, Invoices) with
        ``status`` for ``seconds`` from the first one (so the window does not run out while
        the workers start)."""
        self.failing = (status, seconds)

    def refused(self, path: str) -> tuple[int, dict[str, Any]] | None:
        """Counted; 403 when ``forbidden``, the ``failing`` status while it lasts."""
        self.checkout_requests[path] += 1
        if self.forbidden:  # worded as Stripe's, which quotes the key in part
            shown = stripe_shown(self.key)
            said = f"The provided key '{shown}' does not have the required permissions"
            return 403, {"error": {"type": "invalid_request_error", "message": said}}
        if self.failing and not self.fails_until:
            self.fails_until = time.monotonic() + self.failing[1]
        if self.failing and time.monotonic() < self.fails_until:
            kind = "invalid_request_error" if self.failing[0] == 429 else "api_error"
            return self.failing[0], {"error": {"type": kind, "message": "try again later"}}
        return None

    def intent(self, path: str) -> tuple[int, dict[str, Any]]:
        """``GET /v1/payment_intents/{id}``: one of ``intents``; ``/v1/payment_intents``: all."""
        if path == "/v1/payment_intents":
            listed = list(self.intents.values())
            return 200, {"object": "list", "url": path, "has_more": False, "data": listed}
        found = self.intents.get(path.removeprefix("/v1/payment_intents/"))
        if found is None:
            return 404, {"error": {"type": "invalid_request_error", "code": "resource_missing"}}
        return 200, found

    def checkout(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """A Checkout request's status and answer."""
        parts = path.removeprefix("/v1/checkout/sessions").strip("/").split("/")
        if parts == [""]:
            pi = query.get("payment_intent", [""])[0]
            found = [x for x in self.sessions.values() if x.get("payment_intent") == pi]
            return 200, {"object": "list", "url": path, "has_more": False, "data": found}
        if parts[0] not in self.sessions:
            return 404, {"error": {"type": "invalid_request_error", "code": "resource_missing"}}
        if len(parts) == 1:
            return 200, self._expanded(self.sessions[parts[0]], query)
        items = self.line_items[parts[0]]
        if "starting_after" in query:
            ids = [i["id"] for i in items]
            items = items[ids.index(query["starting_after"][0]) + 1 :]
        limit = min(100, int(query.get("limit", ["10"])[0]))
        return 200, {
            "object": "list",
            "url": path,
            "has_more": len(items) > limit,
            "data": items[:limit],
        }

    def _expanded(self, session: dict[str, Any], query: dict[str, list[str]]) -> dict[str, Any]:
        """A retrieved session with what ``expand[]`` asks: its PaymentIntent (when known)
        and its line items' first page of 10, as Stripe expands a list."""
        expand = {v for k, vs in query.items() if k.startswith("expand[") for v in vs}
        found = dict(session)
        if "payment_intent" in expand and session.get("payment_intent") in self.intents:
            found["payment_intent"] = self.intents[session["payment_intent"]]
        if "line_items" in expand:
            items = self.line_items[session["id"]]
            path = f"/v1/checkout/sessions/{session['id']}/line_items"
            found["line_items"] = {
                "object": "list",
                "url": path,
                "has_more": len(items) > 10,
                "data": items[:10],
            }
        return found

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
        return list_page(found, query, "/v1/events")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                url = urlsplit(self.path)
                api.requests_seen += 1
                if api.redirect_to:
                    return self.answer(302, {}, api.redirect_to + self.path)
                if self.headers.get("Authorization") != f"Bearer {api.key}":
                    given = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    said = f"Invalid API Key provided: {stripe_shown(given)}"
                    error = {"type": "invalid_request_error", "message": said}
                    return self.answer(401, {"error": error})
                stripe_objects = ("/v1/checkout/sessions", "/v1/payment_intents", "/v1/invoices")
                if url.path.startswith(stripe_objects) and (refused := api.refused(url.path)):
                    return self.answer(*refused)
                if url.path.startswith("/v1/invoices"):
                    return self.answer(*api.invoice(url.path, parse_qs(url.query)))
                if url.path.startswith("/v1/checkout/sessions"):
                    return self.answer(*api.checkout(url.path, parse_qs(url.query)))
                if url.path.startswith("/v1/payment_intents"):
                    return self.answer(*api.intent(url.path))
                if url.path == "/v1/webhook_endpoints" and api.forbidden:
                    error = {"type": "invalid_request_error", "message": "not permitted"}
                    return self.answer(403, {"error": error})
                if url.path == "/v1/webhook_endpoints":
                    return self.answer(200, api.endpoint_page(parse_qs(url.query)))
                if url.path != "/v1/events":
                    return self.answer(404, {"error": {"type": "invalid_request_error"}})
                page = api.page(parse_qs(url.query))
                api.gate.wait(timeout=60)
                return self.answer(200, page)

            def do_PUT(self) -> None:  # noqa: N802
                """A session and its line items, as the replay's --serve-sessions gives them."""
                path = urlsplit(self.path).path
                if not path.startswith("/standin/checkout/sessions/"):
                    return self.answer(404, {"error": {"type": "invalid_request_error"}})
                given = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                api.add_session(given["session"], given["line_items"])
                return self.answer(200, {"id": given["session"]["id"]})

            def answer(self, status: int, payload: dict[str, Any], location: str = "") -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Request-Id", "req_local")
                self.end_headers()
                if not api.trickle_s:
                    self.wfile.write(body)
                    return
                api.trickled.append(0)
                for byte in body:
                    time.sleep(api.trickle_s)
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:  # the client cut it
                        return
                    api.trickled[-1] += 1

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def list_page(found: list[dict[str, Any]], query: dict[str, list[str]], url: str) -> dict[str, Any]:
    """One page of ``found`` in Stripe's list format (``starting_after``, ``limit``)."""
    if "starting_after" in query:
        ids = [e["id"] for e in found]
        found = found[ids.index(query["starting_after"][0]) + 1 :]
    limit = min(100, int(query.get("limit", ["10"])[0]))
    return {"object": "list", "url": url, "has_more": len(found) > limit, "data": found[:limit]}


@pytest.fixture
def stripe_api() -> Iterator[EventsApi]:
    """The stand-in, on a free loopback port for the test."""
    api = EventsApi().start()
    yield api
    api.stop()


def stripe_shown(key: str) -> str:
    """A key as Stripe's errors quote it: its kind, stars, its last four characters."""
    kind = key[: key.find("_", 3) + 1] if key.startswith(("sk_", "rk_")) else ""
    return kind + "*" * max(0, len(key) - len(kind) - 4) + key[-4:]
