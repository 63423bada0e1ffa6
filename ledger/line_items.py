"""A Checkout purchase's line items: read from Stripe's API once per payment, before its
first attempt, and kept on the payment (``p_items``), so every attempt gets the same ones
and a retry never reads them again (CHECKOUT_LINE_ITEMS).

When Stripe's API does not answer (429, 5xx, no answer, no request slot in time) the payment
waits in the ledger without a call and without spending an attempt (lua/stripe_wait.lua),
never touching the downstream's circuit breaker; when it refuses the key (401, 403), that is
a configuration error: the payment fails with it, without a call, for a person to retry once
the key is fixed."""

from redis import Redis

from ledger import keys, limits
from ledger.purchase import pack_line_items
from ledger.scripts import Script
from ledger.settings import Settings
from ledger.stripe_api import StripeApi, StripeUnavailable

WAITING_STATES = ("queued", "retrying")
"""States in which a payment is still to be called: only then are its line items read."""


class LineItems:
    """One per process (CHECKOUT_LINE_ITEMS on)."""

    def __init__(self, redis: Redis, settings: Settings, clock_key: str = "") -> None:
        self.api = StripeApi(redis, settings, clock_key)
        self.keep = Script(redis, "keep_line_items", clock_key)
        self.wait = Script(redis, "stripe_wait", clock_key)

    @staticmethod
    def needed(stored: dict[str, str]) -> bool:
        """Whether this payment (its purchase fields, ledger/purchase.py ``stored_fields``)
        is a Checkout purchase still to be called whose line items were never read."""
        return (
            bool(stored.get("p_cs"))
            and "p_items" not in stored
            and (stored.get("state") in WAITING_STATES)
        )

    def fetch(self, payment_key: str, stored: dict[str, str]) -> str:
        """Read the session's line items (every page) and keep them; what is kept (another
        worker's reading, if it was first). Raises StripeUnavailable or StripeRefused."""
        items = self.api.line_items(stored["p_cs"], stored.get("account", ""))
        packed = pack_line_items(items)
        self.keep({"payment": keys.payment(payment_key)}, {"items": packed})
        return packed

    def wait_for_stripe(self, payment_key: str, exc: StripeUnavailable) -> int:
        """Make the payment wait for Stripe's API; when it is due again (ms), 0 if it was no
        longer waiting for a call."""
        base, cap = limits.STRIPE_WAIT_SECONDS
        args = {
            "base_ms": int(base * 1000),
            "cap_ms": int(cap * 1000),
            "retry_after_ms": int(min(exc.retry_after, cap) * 1000),
            "detail": str(exc),
        }
        return int(self.wait({"payment": keys.payment(payment_key)}, args))
