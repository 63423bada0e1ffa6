"""What a payment's purchase may still need from Stripe before its first call, read once and
kept on the payment (``p_*`` fields), so every attempt gets the same purchase and a retry
never reads again:

- its Checkout Session, when its paying event came before the session's
  (CHECKOUT_WAIT_SECONDS): the payment waits for the session's event up to that long, then
  looks the session up by its PaymentIntent through the API (with STRIPE_API_KEY), and is
  fulfilled without a session if there is none;
- the session's line items (CHECKOUT_LINE_ITEMS), every page;
- an invoice's lines, every page, when its event did not carry them all (INVOICE_LINES);
- the PaymentIntent of a payment only a thin event paid (``v1.payment_intent.succeeded``
  listed in PAID_EVENT_TYPES, with STRIPE_API_KEY): a thin event carries no object, so it is
  read once and recorded as a synthetic paid record (:func:`intent_delivery`), which gives the
  payment its amount (refunds recorded meanwhile judged then, as for a snapshot paid event
  that comes late) and its purchase fields (customer, email, metadata, charge).

While Stripe's API does not answer (429, 5xx, nothing, no request slot in time) the payment
waits in the ledger without a call and without spending an attempt (lua/stripe_wait.lua),
never touching the downstream's circuit breaker. When it refuses the key (401, 403), that is
a configuration error: the job fails the payment with it, without a call."""

from dataclasses import dataclass, replace
from typing import Any

import orjson
from redis import Redis

from ledger import keys, limits
from ledger.clock import now_ms
from ledger.deliveries import API_SOURCE, Delivery, Ledger, new_request_id
from ledger.events import THIN_PAID, classify
from ledger.landing import api_record
from ledger.purchase import stored_fields
from ledger.purchase_fields import NO_SESSION, NOT_ASKED, invoice_line, purchase_fields
from ledger.purchase_invoice import ALL_LINES, lines_known_complete
from ledger.purchase_line_items import pack_line_items
from ledger.read.events import INTENT_RECORD
from ledger.scripts import Script
from ledger.settings import Settings
from ledger.stored import whole
from ledger.stripe_api import StripeApi, StripeNotFound, StripeRefused, StripeUnavailable

WAITING_STATES = ("queued", "retrying")
"""States in which a payment is still to be called: only then is Stripe asked."""

INTENT_READ = "p_pi_read"
"""Kept once a thin-only payment's PaymentIntent was read (found or not): never read again."""

INTENT_EVENT = "payment_intent.succeeded"
"""The event whose rule a retrieved PaymentIntent is classified by."""


@dataclass(frozen=True)
class Ready:
    verdict: str
    """go (call now), wait (the payment waits in the ledger: ``reason``) or refused
    (Stripe's API refused the key: ``detail``)."""
    reason: str = ""
    detail: str = ""


GO = Ready("go")


class PurchaseReads:
    """One per process, when a setting asks for a read (:meth:`wanted`)."""

    def __init__(self, redis: Redis, settings: Settings, clock_key: str = "") -> None:
        self.redis, self.settings = redis, settings
        self.api = StripeApi(redis, settings, clock_key) if settings.STRIPE_API_KEY else None
        self.keep = Script(redis, "keep_purchase", clock_key)
        self.wait = Script(redis, "stripe_wait", clock_key)
        self.ledger = Ledger(redis, settings, clock_key) if reads_intents(settings) else None

    @staticmethod
    def wanted(settings: Settings) -> bool:
        return (
            settings.CHECKOUT_LINE_ITEMS
            or settings.INVOICE_LINES
            or settings.CHECKOUT_WAIT_SECONDS > 0
            or reads_intents(settings)
        )

    def prepare(self, payment_key: str, stored: dict[str, str]) -> Ready:
        """Read what the purchase still needs, keep it, and add it to ``stored`` (the
        payment's purchase fields: ledger/purchase.py ``stored_fields``)."""
        if stored.get("state") not in WAITING_STATES:
            return GO
        try:
            if self._amount_unknown(payment_key, stored):
                self._read_intent(payment_key, stored)
            if self._session_late(payment_key, stored):
                late = self._wait_for_session(payment_key, stored)
                if late is not None:
                    return late
            if self.settings.CHECKOUT_LINE_ITEMS and stored.get("p_cs"):
                if "p_items" not in stored:
                    self._read_line_items(payment_key, stored)
            if self._lines_left_out(stored):
                self._read_invoice_lines(payment_key, stored)
        except StripeUnavailable as exc:
            self.wait_for_stripe(payment_key, exc)
            return Ready("wait", keys.STRIPE_WAIT)
        except StripeRefused as exc:
            return Ready("refused", detail=str(exc))
        return GO

    def _amount_unknown(self, payment_key: str, stored: dict[str, str]) -> bool:
        """Paid only by a thin event (no amount yet), its PaymentIntent not read yet, to be
        fulfilled (a reversal's amount was set when it became due)."""
        return (
            self.ledger is not None
            and not stored.get("leg")
            and payment_key.startswith("pi_")
            and not stored.get("amount")
            and INTENT_READ not in stored
        )

    def _read_intent(self, payment_key: str, stored: dict[str, str]) -> None:
        """Read the PaymentIntent, record it (its amount and purchase fields), and refresh
        ``stored`` from the payment, which that record may have taken back."""
        if self.api is None or self.ledger is None:  # never: reads_intents needs the key
            return
        account = stored.get("account", "")
        try:
            intent: dict[str, Any] | None = self.api.payment_intent(payment_key, account)
        except StripeNotFound:
            intent = None
        if intent is not None and intent.get("id") == payment_key:
            self.ledger.record_delivery(intent_delivery(intent, self.settings, account))
        self._keep(payment_key, {INTENT_READ: "1"}, stored)
        stored.update(stored_fields(self.redis, payment_key))

    def _session_late(self, payment_key: str, stored: dict[str, str]) -> bool:
        """A PaymentIntent's payment that names neither a session nor an invoice (a renewal
        has no session), not looked up yet, while CHECKOUT_WAIT_SECONDS is on."""
        return (
            self.settings.CHECKOUT_WAIT_SECONDS > 0
            and payment_key.startswith("pi_")
            and not ({"p_cs", "p_in", NO_SESSION} & stored.keys())
        )

    def _wait_for_session(self, payment_key: str, stored: dict[str, str]) -> Ready | None:
        """Wait (a second at a time, so the session's event is taken soon after it comes)
        until CHECKOUT_WAIT_SECONDS after the payment was paid; then look the session up."""
        left_ms = (
            (whole(stored.get("paid_at")) or 0)
            + int(self.settings.CHECKOUT_WAIT_SECONDS * 1000)
            - now_ms(self.redis)
        )
        if left_ms > 0:
            step = min(left_ms, limits.CHECKOUT_RECHECK_MS)
            self._wait(payment_key, keys.CHECKOUT_WAIT, step, step, 0, "no session yet")
            return Ready("wait", keys.CHECKOUT_WAIT)
        found = None
        if self.api is not None:
            found = self.api.session_for(payment_key, stored.get("account", ""))
        fields = (
            purchase_fields(found)
            if found
            else {NO_SESSION: "1" if self.api is not None else NOT_ASKED}
        )
        self._keep(payment_key, fields, stored)
        return None

    def _read_line_items(self, payment_key: str, stored: dict[str, str]) -> None:
        if self.api is None:  # a settings rule makes CHECKOUT_LINE_ITEMS need the key
            raise StripeRefused("STRIPE_API_KEY is not set")
        items = self.api.line_items(stored["p_cs"], stored.get("account", ""))
        self._keep(payment_key, {"p_items": pack_line_items(items)}, stored)

    def _lines_left_out(self, stored: dict[str, str]) -> bool:
        """With INVOICE_LINES, an invoice whose event left lines out (or no invoice event
        came: a PaymentIntent named it), not read yet."""
        return (
            self.settings.INVOICE_LINES
            and bool(stored.get("p_in"))
            and not lines_known_complete(stored)
            and ALL_LINES not in stored
        )

    def _read_invoice_lines(self, payment_key: str, stored: dict[str, str]) -> None:
        if self.api is None:  # a settings rule makes INVOICE_LINES need the key
            raise StripeRefused("STRIPE_API_KEY is not set")
        lines = self.api.invoice_lines(stored["p_in"], stored.get("account", ""))
        every = orjson.dumps([invoice_line(x) for x in lines]).decode()
        self._keep(payment_key, {ALL_LINES: every}, stored)

    def _keep(self, payment_key: str, fields: dict[str, str], stored: dict[str, str]) -> None:
        """Keep ``fields`` (a field already stored stays) and add them to ``stored``."""
        self.keep({"payment": keys.payment(payment_key)}, {"fields": orjson.dumps(fields)})
        for name, value in fields.items():
            stored.setdefault(name, value)

    def wait_for_stripe(self, payment_key: str, exc: StripeUnavailable) -> int:
        """Make the payment wait for Stripe's API; when it is due again (ms), 0 if it was no
        longer waiting for a call."""
        base, cap = limits.STRIPE_WAIT_SECONDS
        retry_after = int(min(exc.retry_after, cap) * 1000)
        return self._wait(
            payment_key, keys.STRIPE_WAIT, base * 1000, cap * 1000, retry_after, str(exc)
        )

    def _wait(
        self,
        payment_key: str,
        reason: str,
        base_ms: float,
        cap_ms: float,
        retry_after_ms: int,
        detail: str,
    ) -> int:
        args = {
            "reason": reason,
            "base_ms": int(base_ms),
            "cap_ms": int(cap_ms),
            "retry_after_ms": retry_after_ms,
            "detail": detail,
        }
        return int(self.wait({"payment": keys.payment(payment_key)}, args))


def reads_intents(settings: Settings) -> bool:
    """Whether a thin event may pay a payment and Stripe's API can be asked what it paid."""
    return bool(settings.STRIPE_API_KEY) and THIN_PAID in settings.PAID_EVENT_TYPES


def intent_delivery(intent: dict[str, Any], settings: Settings, account: str = "") -> Delivery:
    """What the ledger records of a PaymentIntent read from Stripe's API for a payment its
    thin event paid: a synthetic record, as the landing page's (ledger/landing.py): id
    ``evt_api_{pi}``, type ``payment_intent.retrieved``, source ``api`` (no delivery
    counted), classified by ``payment_intent.succeeded``'s rule whatever PAID_EVENT_TYPES
    lists (the thin event that paid it was listed), so record_delivery.lua gives the payment
    its amount and purchase fields."""
    event = api_record(intent, INTENT_RECORD)
    if account:
        event["account"] = account
    policy = replace(settings.policy, paid_types=settings.policy.paid_types | {INTENT_EVENT})
    classified = classify({**event, "type": INTENT_EVENT}, policy)
    return Delivery(event, orjson.dumps(event), classified, "", API_SOURCE, new_request_id())
