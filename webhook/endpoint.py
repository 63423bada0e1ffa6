"""POST /webhooks/stripe, the hot path, served ahead of Flask: verify, record, answer.

One WSGI call with the checks of webhook/intake.py, the one ledger call, the JSON answers
and the counted rejections, without Flask's request context, routing and ``Request``
object, which cost about a fifth of the web process's CPU a delivery (docs/PERFORMANCE.md,
"The Stripe endpoint ahead of Flask"). Everything else goes to Flask: other paths, other
methods of this path (receiver.py answers them), and a Host header Werkzeug's routing
refuses (checked here by the same call Flask makes). An exception nothing here expects is
answered by Flask's own error handling. No fulfilment happens here.
"""

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson
from werkzeug.exceptions import HTTPException
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wsgi import get_content_length

from ledger.deliveries import Delivery, LedgerUnavailable, new_request_id
from ledger.events import classify
from ledger.faults import fault
from ledger.limits import REPLAY_HEADER
from webhook.connections import client_address
from webhook.exceptions import Rejected
from webhook.intake import ALLOWED_METHOD, delivery_source, parse_event, read_body
from webhook.metrics import REQUEST_LATENCY
from webhook.metrics_alerting import count_unavailable
from webhook.receiver import PATH, count_rejection, rejection_payload
from webhook.store import ledger_of

if TYPE_CHECKING:
    from flask import Flask

log = logging.getLogger("webhook.delivery")
REPLAY_KEY = "HTTP_" + REPLAY_HEADER.upper().replace("-", "_")
Answer = tuple[int, dict[str, object]]


class StripeEndpoint:
    """The Flask app's WSGI callable with POST /webhooks/stripe answered first."""

    def __init__(self, app: "Flask") -> None:
        self.app, self.flask = app, app.wsgi_app

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        if not self.serves(environ):
            return self.flask(environ, start_response)
        started = time.perf_counter()
        try:
            status, payload = self.receive(environ, started)
        except Exception as exc:
            with self.app.request_context(environ):
                return self.app.handle_exception(exc)(environ, start_response)
        body = orjson.dumps(payload)
        # As Werkzeug's Response spells them (the status phrase in capitals).
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        start_response(f"{status} {HTTP_STATUS_CODES[status].upper()}", headers)
        REQUEST_LATENCY.labels(f"{status // 100}xx").observe(time.perf_counter() - started)
        return [body]

    def serves(self, environ: dict[str, Any]) -> bool:
        """A POST to the Stripe endpoint that Flask's routing would take (its Host too)."""
        path = environ.get("PATH_INFO") or ""
        # Werkzeug's routing drops a path's leading slashes: //webhooks/stripe (an endpoint
        # URL joined from https://host/ and /webhooks/stripe) is its route too.
        if path != PATH and "/" + path.lstrip("/") != PATH:
            return False
        if environ.get("REQUEST_METHOD", "GET").upper() != ALLOWED_METHOD:
            return False
        try:
            self.app.url_map.bind_to_environ(environ)
        except HTTPException:  # BadHost: Flask answers it (receiver.bad_request)
            return False
        return True

    def receive(self, environ: dict[str, Any], started: float) -> Answer:
        settings = self.app.extensions["settings"]
        body = b""
        try:
            body = read_body(environ, settings.MAX_BODY_BYTES)
            signature = environ.get("HTTP_STRIPE_SIGNATURE")
            event, secret_index = parse_event(body, signature, settings)
        except Rejected as rejected:
            return self.reject(environ, rejected, body)
        fault("receiver_after_verify")
        secret_label = settings.secret_labels[secret_index]
        delivery = Delivery(
            event=event,
            body=body,
            classified=classify(event, settings.policy),
            secret_label=secret_label,
            source=delivery_source(
                environ.get("HTTP_USER_AGENT", ""), environ.get(REPLAY_KEY), secret_label
            ),
            request_id=new_request_id(),
        )
        try:
            recorded = ledger_of(self.app).record_delivery(delivery)
        except LedgerUnavailable as exc:
            count_unavailable(exc.__cause__)
            log.error(
                orjson.dumps({"event_id": event["id"], "status": 503, "error": str(exc)}).decode()
            )
            return 503, {"error": "ledger_unavailable", "retry": True}
        fault("receiver_after_record")
        log.info(
            orjson.dumps(
                {
                    "event_id": event["id"],
                    "type": event["type"],
                    "payment": delivery.classified.payment_key,
                    "deliveries": recorded.deliveries,
                    "status": 200,
                    "ms": round((time.perf_counter() - started) * 1000, 2),
                }
            ).decode()
        )
        return 200, {
            "event_id": event["id"],
            "deliveries": recorded.deliveries,
            "duplicate": recorded.duplicate,
        }

    def reject(self, environ: dict[str, Any], rejected: Rejected, body: bytes) -> Answer:
        """Count the rejection (never the body itself) and answer with its reason."""
        size = len(body) if body else (get_content_length(environ) or 0)
        remote = client_address(
            environ.get("REMOTE_ADDR"),
            environ.get("HTTP_X_FORWARDED_FOR"),
            self.app.extensions["settings"].TRUSTED_PROXIES,
        )
        method = environ.get("REQUEST_METHOD", "GET").upper()
        count_rejection(ledger_of(self.app), rejected, size, body, remote, method)
        return rejected.status, rejection_payload(rejected)
