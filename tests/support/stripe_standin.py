"""Stripe's side of ``stripe listen``, on loopback: the two endpoints the real CLI talks to.

``POST /v1/stripecli/sessions`` answers a ``StripeCLISession`` (stripe-cli
``pkg/stripeauth/messages.go``): the webhook signing secret and the websocket to open. The
websocket then carries what Stripe sends the CLI, a ``webhook_event`` (a snapshot event,
``pkg/websocket/webhook_messages.go``) or a ``v2_event`` (a thin one), each with the
``http_headers`` the CLI forwards as they are, ``Stripe-Signature`` included; and it
carries back what the CLI reports, an ``event_ack`` per event and a ``webhook_response``
per forward with the endpoint's status and body (``pkg/websocket/messages.go``). The CLI is
pointed here with its ``--api-base``; the session names a plain ``ws://`` URL.
"""

import itertools
import json
import threading
import urllib.parse
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

from ledgerctl import samples
from tests.support.constants import STRIPE_UA

SESSION_PATH = "/v1/stripecli/sessions"
SNAPSHOT, THIN = "webhooks", "v2_events"
"""The websocket features: the names stripe listen asks for (pkg/cmd/listen.go)."""
API_VERSION = "2025-03-31.basil"


class StripeStandin:
    """The session endpoint and its websocket, signing what it sends with ``secret``."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.sessions: list[dict[str, Any]] = []
        """Each session request: its form fields (lists) and its Authorization header."""
        self.received: list[dict[str, Any]] = []
        """Every message the CLI sent over a websocket, in order."""
        self.connections: list[tuple[str, ServerConnection]] = []
        """(feature asked for in the URL, connection) of each websocket the CLI opened."""
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _session_handler(self))
        self._ws: Server = serve(self._websocket, "127.0.0.1", 0)
        self._threads = [
            threading.Thread(target=self._http.serve_forever, daemon=True),
            threading.Thread(target=self._ws.serve_forever, daemon=True),
        ]

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self._ws.socket.getsockname()[1]}/subscribe"

    def start(self) -> "StripeStandin":
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._ws.shutdown()

    def session(self, form: Mapping[str, list[str]]) -> dict[str, Any]:
        """What Stripe answers a session request: a StripeCLISession."""
        features = form.get("websocket_features[]", [])
        number = next(self._ids)
        return {
            "display_connect_filter_warning": False,
            "reconnect_delay": 3600,  # seconds before the CLI resets its websocket
            "secret": self.secret,
            "websocket_authorized_feature": ",".join(features),
            "websocket_id": f"cliws_standin_{number}",
            "websocket_url": self.ws_url,
            "default_version": API_VERSION,
            "latest_version": API_VERSION,
            "device_token": f"devtok_standin_{number}",
        }

    def _websocket(self, connection: ServerConnection) -> None:
        request = connection.request
        query = urllib.parse.urlsplit(request.path if request else "").query
        feature = urllib.parse.parse_qs(query).get("websocket_feature", [""])[0]
        with self._lock:
            self.connections.append((feature, connection))
        try:
            for message in connection:
                with self._lock:
                    self.received.append(json.loads(message))
        except ConnectionClosed:
            pass

    def connected(self, feature: str) -> ServerConnection | None:
        """The last websocket opened for ``feature`` (a snapshot or a thin listener)."""
        with self._lock:
            found = [c for f, c in self.connections if feature in f.split(",")]
        return found[-1] if found else None

    def send(self, event: Mapping[str, Any], signing_secret: str | None = None) -> str:
        """Send ``event`` to the listener for its kind, signed as Stripe signs (with
        ``signing_secret`` instead for a forgery); return the id of this delivery."""
        body = samples.encode(dict(event))
        headers = {
            "Accept": "*/*; q=0.5, application/xml",
            "Cache-Control": "no-cache",
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": STRIPE_UA,
            "Stripe-Signature": samples.sign(body, signing_secret or self.secret),
        }
        delivery = f"we_standin_{next(self._ids)}"
        if event.get("object") == "v2.core.event":
            feature = THIN
            message = {
                "type": "v2_event",
                "http_headers": headers,
                "payload": body.decode(),
                "destination_id": delivery,
            }
        else:
            feature = SNAPSHOT
            message = {
                "type": "webhook_event",
                "endpoint": {"api_version": None},  # None: the account's default version
                "event_payload": body.decode(),
                "http_headers": headers,
                "webhook_conversation_id": f"wc_{delivery}",
                "webhook_id": delivery,
            }
        connection = self.connected(feature)
        assert connection is not None, f"no stripe listen connected for {feature}"
        connection.send(json.dumps(message))
        return delivery

    def response(self, delivery: str) -> dict[str, Any] | None:
        """The CLI's webhook_response for a delivery (the endpoint's status and body)."""
        with self._lock:
            for message in self.received:
                if message.get("type") == "webhook_response" and message["webhook_id"] == delivery:
                    return message
        return None

    def acks(self) -> list[str]:
        """Event ids the CLI acknowledged (event_ack), in order."""
        with self._lock:
            return [m["event_id"] for m in self.received if m.get("type") == "event_ack"]


def _session_handler(standin: StripeStandin) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(size).decode())
            auth = self.headers.get("Authorization", "")
            standin.sessions.append({"form": form, "authorization": auth, "path": self.path})
            if self.path != SESSION_PATH:
                self._answer(404, {"error": {"message": f"Unrecognized request URL {self.path}"}})
            elif not auth.startswith("Bearer sk_test_"):
                self._answer(401, {"error": {"message": "Invalid API Key provided"}})
            else:
                self._answer(200, standin.session(form))

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads ``standin.sessions``."""

    return Handler
