"""What a payment keeps of the objects its events carry, so that its purchase can be built
without Stripe and after the events themselves expire (EVENT_RETENTION_DAYS).

:func:`purchase_fields` reads one event's ``data.object`` (a PaymentIntent, Checkout
Session, Invoice or Charge) and answers the payment-hash fields it says something about,
all named ``p_*`` and stored by record_delivery.lua: a paying event's replace what is stored,
any other event's only fill fields still missing. Empty values are left out (they cost
memory and say nothing). Where to ship and the customer's phone and address are kept
(ledger/purchase_shipping.py); card details (``payment_method_details``, ``billing_details``,
``charges.data[].payment_method_details``) are never read.
"""

from collections.abc import Callable
from typing import Any

import orjson
from redis import Redis

from ledger import keys
from ledger.event_shape import data_object
from ledger.events import invoice_payment_intent, invoice_payment_intent_of
from ledger.payloads import decompress_payload
from ledger.purchase_shipping import address_json, session_shipping_json, shipping_json

Obj = dict[str, Any]

PREFIX = "p_"
"""Every purchase field of a payment hash starts with this (record_delivery.lua refuses
any other)."""

MAX_VALUE = 131_072
"""Longest stored value, in bytes of JSON. Stripe bounds what reaches it: a metadata map has
at most 50 keys of 40 and values of 500 characters, under 110 KB as UTF-8 JSON even with
every character 4 bytes, so any map is kept whole but one whose text JSON must escape
heavily (control characters); of that one, and of an invoice's lines beyond it, the pairs
(in key order) and lines (in Stripe's order, ``p_in_more`` saying so) that fit are kept. A
value over 2 KB (config/redis.conf's hash-max-listpack-value) costs its payment the larger
hash encoding: memory only those payments pay."""

SESSION = {
    "id": "p_cs",
    "client_reference_id": "p_cs_ref",
    "mode": "p_cs_mode",
    "payment_status": "p_cs_status",
    "payment_link": "p_cs_link",
}
"""Checkout Session scalars -> payment hash fields."""

INVOICE = {"id": "p_in", "billing_reason": "p_in_reason"}

NO_SESSION = "p_no_cs"
"""Kept by ledger/purchase_reads.py once CHECKOUT_WAIT_SECONDS ran out without a session:
``1`` when Stripe's API was asked for it and had none, ``NOT_ASKED`` when no
STRIPE_API_KEY was set to ask with. Never asked again."""

NOT_ASKED = "not_asked"


def _id(value: object) -> str:
    """An id as Stripe sends it: a string, or an expanded object's ``id``."""
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, str) else ""


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def metadata_pairs(md: dict[Any, Any]) -> list[tuple[str, str]]:
    """A metadata map's pairs in key order, each value as text. Stripe's values are strings
    (its API refuses any other); a map or list in their place, which only a sender holding
    the webhook secret could put there, is left out: shown whole it could be nested up to
    orjson's 1,024 levels, deeper than Python's ``str()`` recurses, and the delivery must
    still be recorded (docs/ENDPOINT.md)."""
    return sorted((str(k), str(v)) for k, v in md.items() if not isinstance(v, (dict, list)))


def _metadata(obj: Obj) -> str:
    md = obj.get("metadata")
    if not isinstance(md, dict) or not md:
        return ""
    pairs = metadata_pairs(md)
    return _fitting(pairs, lambda n: dict(pairs[:n]))[0]


def _fitting(items: list[Any], shown: Callable[[int], Any]) -> tuple[str, int]:
    """The JSON of ``shown(n)`` for the most leading ``items`` that fit MAX_VALUE, and that
    n ('' and 0 when none does): all of them in one go when they fit, as nearly always,
    else bisected."""
    whole = orjson.dumps(shown(len(items)))
    if len(whole) <= MAX_VALUE:
        return (whole.decode(), len(items)) if items else ("", 0)
    low, high = 0, len(items) - 1
    while low < high:
        mid = (low + high + 1) // 2
        if len(orjson.dumps(shown(mid))) <= MAX_VALUE:
            low = mid
        else:
            high = mid - 1
    return (orjson.dumps(shown(low)).decode(), low) if low else ("", 0)


def _pi_charge(obj: Obj) -> str:
    """The PaymentIntent's charge: ``latest_charge`` (API 2022-11-15 and later), else the
    succeeded one of ``charges`` (earlier versions list them, newest first)."""
    latest = _id(obj.get("latest_charge"))
    if latest:
        return latest
    charges = obj.get("charges")
    data = charges.get("data") if isinstance(charges, dict) else None
    listed = [c for c in data if isinstance(c, dict)] if isinstance(data, list) else []
    paid = [c for c in listed if c.get("status") == "succeeded"] or listed
    return _id(paid[0]) if paid else ""


def _subscription(obj: Obj) -> str:
    """An invoice's or session's subscription: top-level before API 2025-03-31.basil, else
    ``parent.subscription_details.subscription``."""
    found = _id(obj.get("subscription"))
    parent = obj.get("parent")
    details = parent.get("subscription_details") if isinstance(parent, dict) else None
    return found or (_id(details.get("subscription")) if isinstance(details, dict) else "")


def invoice_line(line: Obj) -> dict[str, Any]:
    """An invoice line as the purchase gives it: what was billed, never how it was paid."""
    price = line.get("price")
    pricing = line.get("pricing")
    details = pricing.get("price_details") if isinstance(pricing, dict) else None
    if isinstance(price, dict):
        price_id, product = _id(price), _id(price.get("product"))
    elif isinstance(details, dict):  # API 2025-03-31.basil and later
        price_id, product = _id(details.get("price")), _id(details.get("product"))
    else:
        price_id, product = _id(price), ""
    amount = line.get("amount")
    quantity = line.get("quantity")
    shown: dict[str, Any] = {
        "id": _text(line.get("id")) or None,
        "description": _text(line.get("description")) or None,
        "quantity": quantity if isinstance(quantity, int) else None,
        "amount": amount if isinstance(amount, int) else None,
        "currency": _text(line.get("currency")) or None,
        "price": price_id or None,
        "product": product or None,
    }
    period = line.get("period")  # left out when absent or empty, as the purchase's default
    start, end = (period.get("start"), period.get("end")) if isinstance(period, dict) else (0, 0)
    if isinstance(start, int) and isinstance(end, int) and (start or end):
        shown["period"] = {"start": start, "end": end}
    metadata = line.get("metadata")
    if isinstance(metadata, dict) and metadata:
        shown["metadata"] = dict(metadata_pairs(metadata))
    return shown


def _lines(obj: Obj) -> dict[str, str]:
    """The invoice's lines its event carries (``p_in_lines``) and whether more exist than
    were kept (``p_in_more``: "1" when Stripe left some out, ``has_more``, or MAX_VALUE cut
    some; "0" when they are all there). Written together, so a paying event that replaces
    the lines replaces the flag too (the flag alone if not one line fits); neither when the
    invoice came without its ``lines`` list (then they are not known)."""
    lines = obj.get("lines")
    lines = lines if isinstance(lines, dict) else {}
    data = lines.get("data")
    if not isinstance(data, list):
        return {}
    shown = [invoice_line(x) for x in data if isinstance(x, dict)]
    kept, count = _fitting(shown, lambda n: shown[:n]) if shown else ("[]", 0)
    more = lines.get("has_more") is True or count < len(shown)
    return {"p_in_lines": kept, "p_in_more": "1" if more else "0"}  # '' lines: not stored


def _custom_fields(obj: Obj) -> str:
    """The session's custom fields as key, type and what was entered (a dropdown's chosen
    option; a numeric field's digits, a string as Stripe sends them)."""
    fields = obj.get("custom_fields")
    if not isinstance(fields, list):
        return ""
    shown = []
    for field in fields:
        if not isinstance(field, dict) or not _text(field.get("key")):
            continue
        kind = _text(field.get("type"))
        entered = field.get(kind) if kind else None
        value = entered.get("value") if isinstance(entered, dict) else None
        shown.append({"key": field["key"], "type": kind or None, "value": _text(value) or None})
    return _fitting(shown, lambda n: shown[:n])[0]


def _session(obj: Obj) -> dict[str, str]:
    found = {field: _text(obj.get(name)) for name, field in SESSION.items()}
    details = obj.get("customer_details")
    details = details if isinstance(details, dict) else {}
    found["p_cs_email"] = _text(details.get("email")) or _text(obj.get("customer_email"))
    found["p_cs_name"] = _text(details.get("name"))
    found["p_cs_phone"] = _text(details.get("phone"))
    found["p_cs_addr"] = address_json(details.get("address"))
    found["p_cs_ship"] = session_shipping_json(obj)
    found["p_md_cs"] = _metadata(obj)
    found["p_cs_fields"] = _custom_fields(obj)
    found["p_sub"] = _subscription(obj)
    found["p_in"] = _id(obj.get("invoice"))
    return found


def _invoice(obj: Obj) -> dict[str, str]:
    found = {field: _text(obj.get(name)) for name, field in INVOICE.items()}
    found["p_in_email"] = _text(obj.get("customer_email"))
    found["p_in_name"] = _text(obj.get("customer_name"))
    found.update(_lines(obj))
    found["p_md_in"] = _metadata(obj)
    found["p_sub"] = _subscription(obj)
    found["p_charge"] = _id(obj.get("charge"))
    found["p_pi"] = invoice_payment_intent(obj) or ""
    return found


def _payment_intent(obj: Obj) -> dict[str, str]:
    return {
        # a subscription's PaymentIntent may join a payment its session began (keyed cs_);
        # any other is its payment's key, already
        "p_pi": _text(obj.get("id")) if _id(obj.get("invoice")) else "",
        "p_charge": _pi_charge(obj),
        "p_md_pi": _metadata(obj),
        "p_pi_email": _text(obj.get("receipt_email")),
        "p_pi_ship": shipping_json(obj.get("shipping")),
        "p_in": _id(obj.get("invoice")),
    }


def _charge(obj: Obj) -> dict[str, str]:
    """A PaymentIntent's charge carries the copy Stripe made of the PaymentIntent's metadata
    and receipt_email when it was confirmed: kept apart (``p_ch_*``), for a payment whose
    charge event came before its PaymentIntent's (the PaymentIntent's own win once an event
    brings them: an empty map is not stored, so the charge's copy stays then). Its copy of
    the shipping is the PaymentIntent's field (``p_pi_ship``): the same name, phone and
    address, kept once."""
    found = {"p_charge": _text(obj.get("id"))}
    pi = _id(obj.get("payment_intent"))
    if pi:
        found["p_pi"] = pi if _id(obj.get("invoice")) else ""  # as _payment_intent's
        found["p_ch_md"] = _metadata(obj)
        found["p_ch_email"] = _text(obj.get("receipt_email"))
        found["p_pi_ship"] = shipping_json(obj.get("shipping"))
    return found


def _invoice_payment(obj: Obj) -> dict[str, str]:
    """The tie of an invoice and its PaymentIntent (API basil and later): both ids. The rest
    of the invoice (its subscription, lines, metadata) comes with the invoice's own event."""
    return {"p_in": _id(obj.get("invoice")), "p_pi": invoice_payment_intent_of(obj) or ""}


def purchase_fields(obj: Obj) -> dict[str, str]:
    """The payment-hash fields one event's ``data.object`` gives its purchase (none for an
    object of another kind, or for a thin event, which carries none)."""
    kind = obj.get("object")
    if kind == "checkout.session":
        found = _session(obj)
    elif kind == "invoice":
        found = _invoice(obj)
    elif kind == "payment_intent":
        found = _payment_intent(obj)
    elif kind == "charge":
        found = _charge(obj)
    elif kind == "invoice_payment":
        found = _invoice_payment(obj)
    else:
        return {}
    found["p_customer"] = _id(obj.get("customer"))
    return {k: v for k, v in found.items() if v and len(v) <= MAX_VALUE}


def encode_fields(fields: dict[str, str]) -> str:
    """As record_delivery.lua's ``purchase`` argument: a JSON object, '' when empty."""
    return orjson.dumps(fields).decode() if fields else ""


def recorded_fields(redis: Redis, event_ids: list[str]) -> dict[str, str]:
    """The purchase fields of a payment recorded before the ledger kept them, from its
    events' stored bodies (those not expired yet), as record_delivery.lua would have kept
    them: a paying event's replace, any other's fill what is missing."""
    pipe = redis.pipeline(transaction=False)
    for event_id in event_ids:
        pipe.hmget(keys.event(event_id), "body", "paid")
    found: dict[str, str] = {}
    for body, paid in pipe.execute():
        if body is None:
            continue
        try:
            fields = purchase_fields(data_object(orjson.loads(decompress_payload(body))))
        except (ValueError, orjson.JSONDecodeError):
            continue
        found = {**found, **fields} if paid == b"1" else {**fields, **found}
    return found
