"""The landing page as a second trigger of fulfilment: Stripe's ``fulfill_checkout(session_id)``
with the ledger's guarantees.

The caller's word that a session is paid is never taken: the session is retrieved from
Stripe's API (its PaymentIntent expanded, and its line items with CHECKOUT_LINE_ITEMS), under
the shared STRIPE_API_MAX_RATE. A retrieved session is not an event, but it says what a
``checkout.session.completed`` says, so it enters the ledger as one synthetic record through
the same script as every delivery (record_delivery.lua): id ``evt_api_{session id}``, type
``checkout.session.retrieved``, the session as its ``data.object`` and who asked as its
``triggered_by``, source ``api`` (counted as no delivery, as reconcile's events are),
classified by the session's own rule (paid only in ``payment`` mode with
``payment_status`` paid or no_payment_required, and only while PAID_EVENT_TYPES lists
``checkout.session.completed``). Its purchase fields are the session's over its
PaymentIntent's, with the line items when they came whole. The script makes the first paid
record of a payment enqueue its one job, whichever of the webhook's events and this record
comes first, and a second record of the same session is a duplicate that changes nothing.
A payment the ledger already knows is paid is answered from the ledger, without Stripe.

Only the platform's own sessions are retrieved (no ``Stripe-Account``): a connected
account's session is unknown to the platform's key."""

import re
from typing import Any

import orjson
from redis import Redis

from ledger.deliveries import API_SOURCE, Delivery, Ledger, new_request_id
from ledger.events import classify
from ledger.purchase_fields import purchase_fields
from ledger.purchase_line_items import pack_line_items
from ledger.read.events import SESSION_RECORD
from ledger.read.sessions import SessionFulfilment, session_fulfilment
from ledger.settings import Settings
from ledger.stripe_api import StripeApi, StripeNotFound

RECORD_PREFIX = "evt_api_"
SESSION_EVENT = "checkout.session.completed"
"""The event whose rule (ledger/events.py) a retrieved session is classified by."""
SESSION_ID = re.compile(r"cs_[A-Za-z0-9_]{1,240}", re.ASCII)


class SessionUnknown(Exception):
    """No such Checkout Session (not a session id, Stripe has none, or the ledger has no
    payment for it when only the ledger is asked)."""


class SessionNotPaying(Exception):
    """Stripe says the session is not paid (``payment_status``), or it is not one this
    deployment fulfils (the message says why)."""

    def __init__(self, message: str, payment_status: str) -> None:
        super().__init__(message)
        self.payment_status = payment_status


def check_id(session_id: str) -> None:
    if not SESSION_ID.fullmatch(session_id):
        raise SessionUnknown(f"{session_id[:60]!r} is not a Checkout Session id (cs_...)")


def state(redis: Redis, session_id: str) -> SessionFulfilment:
    """The session's payment as the ledger has it; SessionUnknown if it has none."""
    check_id(session_id)
    found = session_fulfilment(redis, session_id)
    if found is None:
        raise SessionUnknown(f"the ledger has no payment for Checkout Session {session_id}")
    return found


def fulfil(ledger: Ledger, api: StripeApi, session_id: str, by: str) -> SessionFulfilment:
    """Fulfil a paid Checkout Session once, and answer its payment's state; ``by`` (who
    asked: ``ops:LABEL``, ``cli:USER``) is kept in the record's body.

    Raises SessionUnknown, SessionNotPaying, or what StripeApi raises (StripeUnavailable,
    StripeRefused)."""
    check_id(session_id)
    known = session_fulfilment(ledger.redis, session_id)
    if known is not None and known.state != "pending":
        return known
    expand = ("payment_intent", "line_items") if ledger.settings.CHECKOUT_LINE_ITEMS else ()
    try:
        session = api.session(session_id, expand=expand or ("payment_intent",))
    except StripeNotFound as exc:
        raise SessionUnknown(f"Stripe's API has no Checkout Session {session_id}") from exc
    recorded = ledger.record_delivery(delivery_of(session, by, ledger.settings))
    status = str(session.get("payment_status") or "")
    found = session_fulfilment(ledger.redis, session_id, status, not recorded.duplicate)
    if found is None:  # purged the moment after: what Stripe said is all there is
        raise SessionUnknown(f"the payment of Checkout Session {session_id} was just purged")
    return found


def delivery_of(session: dict[str, Any], by: str, settings: Settings) -> Delivery:
    """What the ledger records of a session read from Stripe's API, classified by
    ``checkout.session.completed``'s rule; SessionNotPaying unless that says paid."""
    event = {**session_record(session), "triggered_by": by}
    classified = classify({**event, "type": SESSION_EVENT}, settings.policy)
    if not classified.paid:
        status = str(session.get("payment_status") or "")
        raise SessionNotPaying(_why_not(session, settings.PAID_EVENT_TYPES), status)
    body = orjson.dumps(event)
    return Delivery(event, body, classified, "", API_SOURCE, new_request_id(), purchase_of(session))


def session_record(session: dict[str, Any]) -> dict[str, Any]:
    """The synthetic record of a retrieved session: its expanded objects collapsed to their
    ids, as an event carries them."""
    obj = {**session}
    for name in ("payment_intent", "invoice", "customer", "subscription"):
        if isinstance(obj.get(name), dict):
            obj[name] = obj[name].get("id")
    obj.pop("line_items", None)
    return api_record(obj, SESSION_RECORD)


def api_record(obj: dict[str, Any], record_type: str) -> dict[str, Any]:
    """An object read from Stripe's API, shaped as the event the ledger records it as:
    ``evt_api_{id}`` of type ``record_type``, the object its ``data.object``."""
    return {
        "id": RECORD_PREFIX + str(obj["id"]),
        "object": "event",
        "type": record_type,
        "created": obj.get("created"),
        "livemode": obj.get("livemode") is True,
        "data": {"object": obj},
    }


def purchase_of(session: dict[str, Any]) -> dict[str, str]:
    """The purchase fields the session gives its payment: those of its expanded
    PaymentIntent, the session's own over them, and its line items when Stripe sent every
    one of them (else a worker reads them, ledger/purchase_reads.py)."""
    intent = session.get("payment_intent")
    fields = purchase_fields(intent) if isinstance(intent, dict) else {}
    fields.update(purchase_fields(session_record(session)["data"]["object"]))
    items = session.get("line_items")
    if isinstance(items, dict) and items.get("has_more") is False:
        fields["p_items"] = pack_line_items([i for i in items.get("data") or [] if i])
    return fields


def _why_not(session: dict[str, Any], paid_types: tuple[str, ...]) -> str:
    status, mode = session.get("payment_status"), session.get("mode", "payment")
    if SESSION_EVENT not in paid_types:
        return f"PAID_EVENT_TYPES does not list {SESSION_EVENT}: sessions do not fulfil here"
    if mode != "payment":
        return f"a {mode}-mode session is fulfilled by its invoice's paid event, not here"
    return f"Stripe says the session is not paid (payment_status {status})"
