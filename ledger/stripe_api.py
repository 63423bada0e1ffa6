"""Reading Stripe's API for a payment's purchase: a Checkout Session's line items and an
invoice's lines (every page), a session itself, a PaymentIntent. One client per process,
through stripe-python, without its own retries: a refused or unanswered request is the
caller's to wait out (the payment waits in the ledger), and every request first takes a slot
under STRIPE_API_MAX_RATE, a rate shared by every worker on every host
(lua/stripe_rate.lua)."""

import time
from collections.abc import Callable
from typing import Any

import stripe
from redis import Redis

from ledger import limits
from ledger.redact import redact
from ledger.scripts import Script
from ledger.settings import Settings
from ledger.stripe_http import StripeSession

PAGE = 100
"""Objects per request: the most Stripe's list endpoints return."""


class StripeUnavailable(Exception):
    """Stripe's API did not answer, answered 429 or 5xx, or no request slot came free in
    time: ask again later. ``retry_after`` (seconds, 0 if none) is Stripe's Retry-After."""

    def __init__(self, message: str, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StripeRefused(Exception):
    """Stripe's API refused the key (401 or 403) or the request: a configuration error that
    waiting will not mend."""


class StripeNotFound(StripeRefused):
    """Stripe's API has no such object (404)."""


def _retry_after(exc: stripe.StripeError) -> float:
    value = (exc.headers or {}).get("Retry-After", "") if exc.headers else ""
    return float(value) if value.isascii() and value.isdigit() else 0.0


def client_of(settings: Settings) -> stripe.StripeClient:
    """stripe-python's client for STRIPE_API_KEY at STRIPE_API_BASE, without retries of its
    own, each request ending within its timeout, following no redirect."""
    return stripe_client(settings.STRIPE_API_KEY, settings.STRIPE_API_BASE)


def stripe_client(
    api_key: str,
    api_base: str,
    retries: int = 0,
    timeout_s: float = limits.STRIPE_API_TIMEOUT_SECONDS,
) -> stripe.StripeClient:
    """The service's stripe-python client: ``timeout_s`` for each request in all (not only
    each read: ledger/stripe_http.py), no redirect followed, ``retries`` of its own."""
    return stripe.StripeClient(
        api_key,
        base_addresses={"api": api_base},
        max_network_retries=retries,
        http_client=stripe.RequestsClient(timeout=timeout_s, session=StripeSession(timeout_s)),
    )


class StripeApi:
    """One per process."""

    def __init__(
        self,
        redis: Redis,
        settings: Settings,
        clock_key: str = "",
        slot_wait_s: float = limits.RATE_WAIT_SECONDS,
    ) -> None:
        self.settings = settings
        self.client = client_of(settings)
        self.rate = Script(redis, "stripe_rate", clock_key)
        self.slot_wait_s = slot_wait_s

    def _slot(self) -> None:
        """Wait for a free request slot, up to ``slot_wait_s``."""
        give_up = time.monotonic() + self.slot_wait_s
        while True:
            wait_ms = int(self.rate({}, {"max_rate": self.settings.STRIPE_API_MAX_RATE}))
            if wait_ms == 0:
                return
            if time.monotonic() + wait_ms / 1000 > give_up:
                raise StripeUnavailable("no request slot under STRIPE_API_MAX_RATE", wait_ms / 1000)
            time.sleep(wait_ms / 1000)

    def _call(self, request: Any, what: str) -> Any:
        """One request for ``what`` (said in its error: which object, read how), after its
        slot; Stripe's errors as the two kinds above."""
        self._slot()
        try:
            return request()
        except (stripe.AuthenticationError, stripe.PermissionError) as exc:
            raise StripeRefused(
                f"Stripe's API refused STRIPE_API_KEY ({exc.http_status}): "
                f"{redact(exc.user_message or type(exc).__name__)}"
            ) from exc
        except (stripe.RateLimitError, stripe.APIConnectionError) as exc:
            raise StripeUnavailable(_failed(exc, what), _retry_after(exc)) from exc
        except stripe.StripeError as exc:
            if exc.http_status is None or exc.http_status >= 500:
                raise StripeUnavailable(_failed(exc, what), _retry_after(exc)) from exc
            if exc.http_status == 404:
                raise StripeNotFound(_failed(exc, what)) from exc
            raise StripeRefused(_failed(exc, what)) from exc

    def _options(self, account: str) -> Any:
        return {"stripe_account": account} if account else {}

    def _every(self, list_page: Callable[[Any], Any], what: str) -> list[dict[str, Any]]:
        """Every object of a Stripe list, page after page (``list_page(params)``)."""
        found: list[dict[str, Any]] = []
        while True:
            params: dict[str, Any] = {"limit": PAGE}
            if found:
                params["starting_after"] = found[-1]["id"]
            page = self._call(lambda p=params: list_page(p), what)
            found += [item.to_dict() for item in page.data]
            if not page.has_more or not page.data:
                return found

    def line_items(self, session_id: str, account: str = "") -> list[dict[str, Any]]:
        """Every line item of a Checkout Session, as Stripe sends them."""
        items = self.client.v1.checkout.sessions.line_items
        return self._every(
            lambda p: items.list(session_id, p, self._options(account)),
            f"the line items of {session_id}",
        )

    def invoice_lines(self, invoice_id: str, account: str = "") -> list[dict[str, Any]]:
        """Every line of an invoice, as Stripe sends them (its event carries the first
        page only)."""
        lines = self.client.v1.invoices.line_items
        return self._every(
            lambda p: lines.list(invoice_id, p, self._options(account)),
            f"the lines of {invoice_id}",
        )

    def session_for(self, payment_intent: str, account: str = "") -> dict[str, Any] | None:
        """The Checkout Session that made a PaymentIntent, if any."""
        sessions = self.client.v1.checkout.sessions
        found = self._call(
            lambda: sessions.list(
                {"payment_intent": payment_intent, "limit": 1}, self._options(account)
            ),
            f"the Checkout Session of {payment_intent}",
        )
        return dict(found.data[0].to_dict()) if found.data else None

    def payment_intent(self, payment_intent: str, account: str = "") -> dict[str, Any]:
        """A PaymentIntent as Stripe's API answers it now."""
        intents = self.client.v1.payment_intents
        found = self._call(
            lambda: intents.retrieve(payment_intent, None, self._options(account)), payment_intent
        )
        return dict(found.to_dict())

    def session(
        self, session_id: str, account: str = "", expand: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """A Checkout Session as Stripe's API answers it now, with ``expand``'s fields
        expanded."""
        sessions = self.client.v1.checkout.sessions
        params: Any = {"expand": list(expand)} if expand else None
        found = self._call(
            lambda: sessions.retrieve(session_id, params, self._options(account)), session_id
        )
        return dict(found.to_dict())


def _failed(exc: stripe.StripeError, what: str) -> str:
    status = f" {exc.http_status}" if exc.http_status else ""
    return f"Stripe's API:{status} {type(exc).__name__} reading {what}"


def key_refused(settings: Settings, sessions: bool, intents: bool, invoices: bool) -> str | None:
    """Why Stripe's API refuses STRIPE_API_KEY (401, 403) for what a worker reads with it:
    Checkout Sessions (``sessions``: CHECKOUT_LINE_ITEMS), PaymentIntents (``intents``: a thin
    event may pay), Invoices (``invoices``: INVOICE_LINES), or None: checked when a worker
    starts. No answer says nothing about the key: the payments wait for the API then."""
    if not (sessions or intents or invoices):
        return None
    client = client_of(settings)
    reads: list[tuple[str, Callable[[Any], object]]] = []
    if sessions:
        reads.append(("Checkout Sessions", client.v1.checkout.sessions.list))
    if intents:
        reads.append(("PaymentIntents", client.v1.payment_intents.list))
    if invoices:
        reads.append(("Invoices", client.v1.invoices.list))
    for name, read in reads:
        try:
            read({"limit": 1})
        except (stripe.AuthenticationError, stripe.PermissionError) as exc:
            return f"Stripe's API refused it ({exc.http_status}) for reading {name}"
        except stripe.StripeError:
            continue
    return None
