"""The purchase: what a payment bought, the one object every kind of action receives (a
``module:function`` as its argument, HTTP as its JSON body, the built-in downstream as
stored columns), the ops API shows, and webhook/openapi.yaml describes (``Purchase``).

Built here and only here, from what the payment hash keeps of its events (the ``p_*``
fields: ledger/purchase_fields.py, and what ledger/purchase_reads.py read once from Stripe's
API) and its paid fields, without calling Stripe, so it is the same for every attempt and
still whole after its events expire. Versioned by ``schema``: fields are added, never
renamed or removed; a reader ignores fields it does not know. Personal data: the customer's
email and name (from the Checkout Session, the Invoice or the PaymentIntent's
``receipt_email``), phone and address, and where to ship (ledger/purchase_shipping.py);
never card details. An invoice's part: ledger/purchase_invoice.py.
"""

from typing import Any, Literal

import msgspec
import orjson
from redis import Redis

from ledger import keys
from ledger.purchase_fields import recorded_fields
from ledger.purchase_invoice import Invoice, invoice_of
from ledger.purchase_line_items import LineItem, line_items_of
from ledger.purchase_shipping import Address, Shipping, address_of, shipping_of
from ledger.refunds_counted import refunded_amount
from ledger.stored import text, whole

SCHEMA: Literal[1] = 1


class PaidBy(msgspec.Struct, kw_only=True, frozen=True):
    event_id: str | None
    """The event that made the payment due (the ledger's ``paid_by``)."""
    type: str | None


class CustomerDetails(msgspec.Struct, kw_only=True, frozen=True):
    email: str | None
    name: str | None
    phone: str | None
    address: Address | None
    """The address the customer gave Checkout (billing; where to ship is ``shipping``)."""


class CustomField(msgspec.Struct, kw_only=True, frozen=True):
    key: str
    type: str | None
    """``text``, ``numeric`` or ``dropdown``."""
    value: str | None
    """What was entered or chosen (a dropdown's option ``value``); null if left empty."""


class CheckoutSession(msgspec.Struct, kw_only=True, frozen=True):
    id: str
    client_reference_id: str | None
    mode: str | None
    payment_status: str | None
    customer_details: CustomerDetails
    metadata: dict[str, str]
    payment_link: str | None
    """The Payment Link it was made from (``plink_…``), if any: which link was bought."""
    custom_fields: list[CustomField]
    """What the customer typed or chose in the session's custom fields."""


class PurchaseMetadata(msgspec.Struct, kw_only=True, frozen=True):
    """Each object's own ``metadata``, never merged: null where the purchase has no such
    object, ``{}`` where it has one without metadata."""

    payment_intent: dict[str, str] | None
    checkout_session: dict[str, str] | None
    invoice: dict[str, str] | None


class Purchase(msgspec.Struct, kw_only=True, frozen=True):
    """What was bought (schema 1). Flat scalars at the top, so SQL named parameters such as
    ``%(client_reference_id)s`` can take them; the nested parts say where each came from.
    Neither it nor its parts are closed to new fields: schema 1 may gain some."""

    schema: Literal[1]
    payment_key: str
    """The PaymentIntent id; without one, the Checkout Session's (``cs_…``, a free Checkout),
    the invoice's, or a charge's made without one (``ch_…``, the Charges API):
    ledger/events.py."""
    idempotency_key: str
    """Stable for every attempt: a replay-safe downstream dedupes on it."""
    token: int
    """The fencing token of this attempt."""
    payment_intent: str | None
    checkout_session_id: str | None
    client_reference_id: str | None
    customer: str | None
    customer_email: str | None
    customer_name: str | None
    shipping: Shipping | None
    """Where to ship: the session's shipping details, else the PaymentIntent's."""
    charge: str | None
    invoice_id: str | None
    subscription: str | None
    amount: int | None
    """Amount paid, in the currency's smallest unit; in a fulfilment again after a dispute
    won, what it grants again (ledger/reversals.py refulfil_of)."""
    refunded_amount: int
    """Counted as refunded (pending refunds too) when this attempt began (a refund in full
    before the call means no call), in the currency's smallest unit; 0 when none. To tell,
    not to grant by (workers/api.py)."""
    currency: str | None
    livemode: bool
    paid_by: PaidBy
    event_ids: list[str]
    checkout_session: CheckoutSession | None
    invoice: Invoice | None
    line_items: list[LineItem] | None
    """Null unless fetched (STRIPE_API_KEY, a Checkout payment)."""
    metadata: PurchaseMetadata

    def to_dict(self) -> dict[str, Any]:
        """As the actions receive it: plain dicts, lists, strings and numbers."""
        return msgspec.to_builtins(self)


PAID_FIELDS = (
    "amount",
    "currency",
    "livemode",
    "events",
    "paid_by",
    "paid_type",
    "paid_at",
    "state",
    "account",
)
"""What the purchase reads of a payment hash besides its ``p_*`` fields (``state``,
``paid_at`` and ``account``: whether, since when and for which account Stripe is still to be
asked: ledger/purchase_reads.py)."""

REVERSAL_FIELDS = (
    "leg",
    "rf",
    "rf_charge",
    "rf_charge_at",
    "rf_failed",
    "dispute",
    "notes",
    "reversal_why",
    "reversal_refund",
    "reversal_amount",
    "called_on",
    "rv",
    "rv_failed",
    "reversed_amount",
)
"""What a job also reads of a payment hash: which leg is due (``leg`` = ``reverse`` once its
reversal is, ``refulfil`` once fulfilled again after a dispute won, ``settle``), what the
reversal call says (ledger/reversals.py) and what a fulfilment again grants (``rv``,
``rv_failed``, ``reversed_amount``), and which downstreams its calls went to (a settlement's:
workers/jobs.py)."""


def idempotency_key(payment_key: str) -> str:
    """Stable across every attempt for a payment, so a replay-safe downstream dedupes."""
    return f"fulfil:{payment_key}"


def _json(value: str | None, kind: type[Any]) -> Any:
    if not value:
        return None
    try:
        return msgspec.convert(orjson.loads(value), kind)
    except (orjson.JSONDecodeError, msgspec.ValidationError):
        return None


def _metadata(f: dict[str, str], field: str, present: bool) -> dict[str, str] | None:
    found = _json(f.get(field), dict[str, str])
    return found if found is not None else ({} if present else None)


def _session(f: dict[str, str]) -> CheckoutSession | None:
    if not f.get("p_cs"):
        return None
    return CheckoutSession(
        id=f["p_cs"],
        client_reference_id=f.get("p_cs_ref") or None,
        mode=f.get("p_cs_mode") or None,
        payment_status=session_status(f),
        customer_details=CustomerDetails(
            email=f.get("p_cs_email") or None,
            name=f.get("p_cs_name") or None,
            phone=f.get("p_cs_phone") or None,
            address=address_of(f.get("p_cs_addr")),
        ),
        metadata=_metadata(f, "p_md_cs", True) or {},
        payment_link=f.get("p_cs_link") or None,
        custom_fields=_json(f.get("p_cs_fields"), list[CustomField]) or [],
    )


def session_status(f: dict[str, str]) -> str | None:
    """The session's ``payment_status``; ``paid`` once the payment is (``paid_by``): an
    asynchronous method's session completes ``unpaid``, and its PaymentIntent's success may
    be recorded before the session's async_payment_succeeded, or without it. Stripe's guide
    has fulfilment skip an ``unpaid`` session."""
    status = f.get("p_cs_status") or None
    return "paid" if status == "unpaid" and f.get("paid_by") else status


def email_of(f: dict[str, str]) -> str | None:
    """The customer's email: the Checkout Session's, the invoice's, the PaymentIntent's
    receipt_email, else its charge's copy of it (purchase_fields._charge)."""
    return f.get("p_cs_email") or f.get("p_in_email") or f.get("p_pi_email") or f.get("p_ch_email")


def purchase_of(payment_key: str, token: int, f: dict[str, str]) -> Purchase:
    """The purchase from a payment hash (decoded): its ``p_*`` and paid fields."""
    session, invoice = _session(f), invoice_of(f)
    # a payment keyed by its session or invoice (no PaymentIntent when it began) learns it
    pi = payment_key if payment_key.startswith("pi_") else f.get("p_pi") or None
    amount = whole(f.get("amount"))
    return Purchase(
        schema=SCHEMA,
        payment_key=payment_key,
        idempotency_key=idempotency_key(payment_key),
        token=token,
        payment_intent=pi,
        checkout_session_id=session.id if session else None,
        client_reference_id=session.client_reference_id if session else None,
        customer=f.get("p_customer") or None,
        customer_email=email_of(f) or None,
        customer_name=f.get("p_cs_name") or f.get("p_in_name") or None,
        shipping=shipping_of(f),
        charge=f.get("p_charge") or None,
        invoice_id=invoice.id if invoice else None,
        subscription=f.get("p_sub") or None,
        amount=amount if amount is not None and amount >= 0 else None,
        refunded_amount=refunded_amount(f),
        currency=f.get("currency") or None,
        livemode=f.get("livemode") == "1",
        paid_by=PaidBy(event_id=f.get("paid_by") or None, type=f.get("paid_type") or None),
        event_ids=f.get("events", "").split(),
        checkout_session=session,
        invoice=invoice,
        line_items=line_items_of(f.get("p_items")),
        metadata=PurchaseMetadata(
            payment_intent=_metadata(f, "p_md_pi" if "p_md_pi" in f else "p_ch_md", pi is not None),
            checkout_session=_metadata(f, "p_md_cs", session is not None),
            invoice=_metadata(f, "p_md_in", invoice is not None),
        ),
    )


def stored_fields(redis: Redis, payment_key: str) -> dict[str, str]:
    """The fields of a payment hash the purchase is built from (one HGETALL: the ``p_*``
    fields are not known by name in advance); for a payment without any, recorded before the
    ledger kept them, what its events' bodies say."""
    raw: dict[Any, Any] = redis.hgetall(keys.payment(payment_key))
    found = {
        name: text(v)
        for k, v in raw.items()
        if (name := text(k)).startswith("p_") or name in PAID_FIELDS or name in REVERSAL_FIELDS
    }
    if not any(name.startswith("p_") for name in found):  # recorded before p_* were kept
        found = {**recorded_fields(redis, found.get("events", "").split()), **found}
    return found


def read_purchase(redis: Redis, payment_key: str, token: int) -> Purchase:
    """The purchase of a payment for the attempt holding ``token``."""
    return purchase_of(payment_key, token, stored_fields(redis, payment_key))
