"""Checkout Sessions for a stand-in of Stripe's API: a replay's generated Checkout purchases
name sessions no real Stripe account has, so a service that reads their line items
(CHECKOUT_LINE_ITEMS) or looks a late session up (CHECKOUT_WAIT_SECONDS) is pointed at a
stand-in (STRIPE_API_BASE), and ``--serve-sessions URL`` gives that stand-in each session
with its line items before the session's events are sent (``PUT
/standin/checkout/sessions/{id}``, what tests/support/stripe_api.py takes; run on its own
by scripts/stripe_api_standin.py). Without it,
nothing is sent anywhere but the webhook endpoint, as against a real Stripe CLI setup."""

import random
from typing import Any
from urllib.parse import urlsplit

import requests

from ledgerctl.replay.sources import Item

PATH = "/standin/checkout/sessions/"


class NoStandIn(Exception):
    """--serve-sessions names no stand-in: Stripe's own API, no http(s) URL, or a server
    that does not take the sessions. One line, said before any event is sent."""


def checked(base_url: str) -> str:
    """``base_url`` if it may be a stand-in; Stripe's own hosts are never sent a session."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise NoStandIn(f"--serve-sessions {base_url}: expected a stand-in's http(s) URL")
    if host == "stripe.com" or host.endswith(".stripe.com"):
        raise NoStandIn(
            f"--serve-sessions {base_url}: Stripe's own API takes no sessions from a replay;"
            " give a stand-in's URL (the service's STRIPE_API_BASE)"
        )
    return base_url


def sessions_of(items: list[Item]) -> list[dict[str, Any]]:
    """The Checkout Sessions the items' events carry, once each."""
    found: dict[str, dict[str, Any]] = {}
    for event, _ in items:
        obj = (event.get("data") or {}).get("object") or {}
        if obj.get("object") == "checkout.session" and isinstance(obj.get("id"), str):
            found.setdefault(obj["id"], obj)
    return list(found.values())


def line_items(session: dict[str, Any]) -> list[dict[str, Any]]:
    """One to three line items, as Stripe's API lists them, adding up to the session's
    ``amount_total``; the same for the same session every time."""
    rng = random.Random(session["id"])
    total, currency = int(session.get("amount_total") or 0), session.get("currency") or "usd"
    count = rng.randint(1, 3)
    shares = [total // count] * count
    shares[0] += total - sum(shares)
    tail = session["id"][-8:]
    return [
        {
            "id": f"li_{tail}{i:06d}",
            "object": "item",
            "amount_subtotal": share,
            "amount_total": share,
            "currency": currency,
            "description": f"Replay item {i + 1}",
            "price": {
                "id": f"price_replay{i:06d}",
                "object": "price",
                "currency": currency,
                "product": f"prod_replay{i:06d}",
                "unit_amount": share,
            },
            "quantity": 1,
        }
        for i, share in enumerate(shares)
    ]


def serve(base_url: str, items: list[Item], timeout: float) -> int:
    """Give the stand-in at ``base_url`` every session of ``items`` with its line items;
    how many. One it cannot reach, that refuses one, or that redirects (never followed)
    ends the run before any event is sent (NoStandIn)."""
    sessions = sessions_of(items)
    with requests.Session() as http:
        for session in sessions:
            body = {"session": session, "line_items": line_items(session)}
            url = checked(base_url).rstrip("/") + PATH + session["id"]
            try:
                answer = http.put(url, json=body, timeout=timeout, allow_redirects=False)
            except requests.RequestException as exc:
                raise NoStandIn(f"--serve-sessions {base_url}: {type(exc).__name__}") from exc
            if not answer.ok or answer.is_redirect:  # a redirect is refused, not followed
                raise NoStandIn(
                    f"--serve-sessions {base_url}: PUT {PATH}{{id}} answered"
                    f" {answer.status_code}: no stand-in of Stripe's API there"
                )
    return len(sessions)
