"""Where a purchase ships to, and how to reach the customer: read from the objects the events
carry (ledger/purchase_fields.py stores them as ``p_*`` fields) and given back as the
purchase's ``shipping`` and its session's ``customer_details`` (ledger/purchase.py).

Stripe names a Checkout Session's shipping three ways: ``shipping`` before API 2022-08-01,
``shipping_details`` from then until 2025-03-31.basil, ``collected_information.
shipping_details`` from 2025-02-24.acacia on (both sent until basil; the latter is the one an
update of the session's shipping changes). A PaymentIntent, and its charge's copy, carry
``shipping``; its ``carrier`` and ``tracking_number`` are what a merchant sets after shipping,
so the purchase leaves them out. Personal data, like the email; never the card's billing
details.

Kept by position, as JSON arrays (half the bytes of keyed objects in every payment hash that
ships): an address as ``[line1, line2, city, state, postal_code, country]``, a shipping as
``[name, phone, address]``.
"""

from typing import Any

import msgspec
import orjson

ADDRESS_FIELDS = ("line1", "line2", "city", "state", "postal_code", "country")


class Address(msgspec.Struct, kw_only=True, frozen=True):
    line1: str | None
    line2: str | None
    city: str | None
    state: str | None
    postal_code: str | None
    country: str | None
    """Two-letter ISO code."""


class Shipping(msgspec.Struct, kw_only=True, frozen=True):
    """Where to ship: the Checkout Session's shipping details (with the phone the session
    collected), else the PaymentIntent's ``shipping``."""

    name: str | None
    phone: str | None
    address: Address | None


Row = list[Any]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _address_row(value: object) -> Row | None:
    if not isinstance(value, dict):
        return None
    row = [_text(value.get(name)) for name in ADDRESS_FIELDS]
    return row if any(row) else None


def _shipping_row(value: object) -> Row | None:
    if not isinstance(value, dict):
        return None
    row = [_text(value.get("name")), _text(value.get("phone")), _address_row(value.get("address"))]
    return row if any(row) else None


def _json(row: Row | None) -> str:
    return orjson.dumps(row).decode() if row else ""


def address_json(value: object) -> str:
    """A Stripe address as kept, '' when it has none of its parts."""
    return _json(_address_row(value))


def shipping_json(value: object) -> str:
    """A Stripe ``shipping`` as kept (name, phone, address), '' when it has none of them."""
    return _json(_shipping_row(value))


def session_shipping_json(session: dict[str, Any]) -> str:
    """A Checkout Session's shipping, whichever API version shaped it."""
    collected = session.get("collected_information")
    nested = collected.get("shipping_details") if isinstance(collected, dict) else None
    for value in (nested, session.get("shipping_details"), session.get("shipping")):
        found = shipping_json(value)
        if found:
            return found
    return ""


def _row(stored: str | None) -> Row | None:
    if not stored:
        return None
    try:
        row = orjson.loads(stored)
    except orjson.JSONDecodeError:
        return None
    return row if isinstance(row, list) else None


def _texts(row: Row, size: int) -> list[str | None] | None:
    if len(row) != size:
        return None
    return [v if isinstance(v, str) else None for v in row]


def _address(row: object) -> Address | None:
    found = _texts(row, len(ADDRESS_FIELDS)) if isinstance(row, list) else None
    return Address(**dict(zip(ADDRESS_FIELDS, found, strict=True))) if found else None


def address_of(stored: str | None) -> Address | None:
    return _address(_row(stored))


def shipping_of(f: dict[str, str]) -> Shipping | None:
    """The purchase's shipping from a payment hash: the session's (``p_cs_ship``, with the
    phone the session collected when the shipping names none), else the PaymentIntent's or
    its charge's copy (``p_pi_ship``)."""
    session = _row(f.get("p_cs_ship"))
    row = session or _row(f.get("p_pi_ship"))
    names = _texts(row[:2], 2) if row and len(row) == 3 else None
    if row is None or names is None:
        return None
    name, phone = names
    if session is not None:
        phone = phone or f.get("p_cs_phone") or None
    return Shipping(name=name, phone=phone, address=_address(row[2]))


def address_text(address: Address | None) -> str | None:
    """An address on one line for a person (the payment's page, the CLI): its parts in
    order, the empty ones left out; None for none."""
    parts = [address.line1, address.line2, address.postal_code] if address else []
    parts += [address.city, address.state, address.country] if address else []
    return ", ".join(part for part in parts if part) or None
