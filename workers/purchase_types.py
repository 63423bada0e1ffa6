"""The purchase your fulfilment code is given, typed: what ``workers.api`` exports as
``Purchase``, ``ReversalCall`` and the parts of each (import them from there). The same
fields as ledger/purchase.py and ledger/reversals.py build (tests/unit/test_api.py)."""

from typing import TypedDict


class PaidBy(TypedDict):
    event_id: str | None
    """The event that made the payment paid."""
    type: str | None


class Address(TypedDict):
    line1: str | None
    line2: str | None
    city: str | None
    state: str | None
    postal_code: str | None
    country: str | None
    """Two-letter ISO code."""


class Shipping(TypedDict):
    name: str | None
    phone: str | None
    """The PaymentIntent's shipping phone; for a session's shipping, the phone it collected."""
    address: Address | None


class CustomerDetails(TypedDict):
    email: str | None
    name: str | None
    phone: str | None
    address: Address | None
    """The address the customer gave Checkout (billing; where to ship is ``shipping``)."""


class CustomField(TypedDict):
    key: str
    type: str | None
    """``text``, ``numeric`` or ``dropdown``."""
    value: str | None
    """What was entered or chosen (a dropdown's option ``value``); None if left empty."""


class CheckoutSession(TypedDict):
    id: str
    client_reference_id: str | None
    """Your order id, as you passed it to Checkout."""
    mode: str | None
    payment_status: str | None
    customer_details: CustomerDetails
    metadata: dict[str, str]
    payment_link: str | None
    """The Payment Link it was made from (``plink_…``), if any."""
    custom_fields: list[CustomField]
    """What the customer typed or chose in the session's custom fields."""


class LinePeriod(TypedDict):
    start: int
    """Unix seconds."""
    end: int


class InvoiceLine(TypedDict):
    """One line of the invoice: its event's, or every one read from Stripe's API
    (INVOICE_LINES); ``Invoice["lines_complete"]`` says which."""

    id: str | None
    description: str | None
    quantity: int | None
    amount: int | None
    currency: str | None
    price: str | None
    product: str | None
    period: LinePeriod | None
    """What it bills for: a subscription's service period, to grant until its end."""
    metadata: dict[str, str]
    """The line's own: a subscription's metadata is on its lines, not on the invoice."""


class Invoice(TypedDict):
    id: str
    subscription: str | None
    billing_reason: str | None
    lines: list[InvoiceLine]
    """The lines its events carried (Stripe sends the first page only), or with
    INVOICE_LINES every line, read once from Stripe's API before the first attempt."""
    lines_complete: bool
    """False when ``lines`` are only the first of them (Stripe's event left some out, or
    the ledger's 128 KiB cap cut some) or none are known (no invoice event came before the
    call), and INVOICE_LINES did not read them: do not fulfil from them as if they were all."""


class LineItem(TypedDict):
    """One of the Checkout Session's line items, as Stripe's API lists them (prices in the
    currency's smallest unit). Each is None where Stripe gave none, and the last six in
    line items read before they were kept."""

    id: str | None
    """Stripe's line item (``li_…``): key a row per item by it."""
    price: str | None
    product: str | None
    quantity: int | None
    unit_amount: int | None
    amount_total: int | None
    currency: str | None
    description: str | None
    amount_subtotal: int | None
    amount_discount: int | None
    amount_tax: int | None
    price_lookup_key: str | None
    price_metadata: dict[str, str] | None
    """The price's own metadata (credits, a plan: what a grant per item may read)."""


class PurchaseMetadata(TypedDict):
    """Each object's ``metadata`` where it came from, never merged (None: not seen)."""

    payment_intent: dict[str, str] | None
    """While no event of the PaymentIntent brought any: the copy Stripe made on its charge."""
    checkout_session: dict[str, str] | None
    invoice: dict[str, str] | None


class Purchase(TypedDict):
    """What was bought, as your code receives it (schema 1; the HTTP action's JSON body too:
    webhook/openapi.yaml, ``Purchase``). Every top-level field is also a SQL named parameter
    of FULFILMENT_SQL (``%(client_reference_id)s``; nested values as JSON text). The same
    fields as ``ledger.purchase.Purchase``, which builds it (tests/unit/test_api.py)."""

    schema: int
    payment_key: str
    """The ledger's key of the payment: the PaymentIntent id (``pi_…``); where there is none,
    the Checkout Session's (``cs_…``: a Checkout that took no payment, ``amount_total`` 0,
    has no PaymentIntent) or the invoice's (``in_…``: one that charged nothing, or with
    FULFIL_UNLINKED_INVOICES one paid without naming its PaymentIntent) or a charge's
    (``ch_…``: one the Charges API made, with no PaymentIntent). Key your records by it,
    not by ``payment_intent`` (None then)."""
    idempotency_key: str
    """``fulfil:<payment_key>`` (``fulfil:cs_…`` for a free Checkout): the same on every
    attempt; apply at most one effect per key. ``refulfil:<payment_key>`` when the purchase
    is granted again after a dispute won after its reversal (REVERSAL_DISPUTE_WON=fulfil): a
    second call for the same ``payment_key``, whose first effect was taken back, so a record
    keyed by ``payment_key`` alone is there already (grant again what the reversal took)."""
    token: int
    """The fencing token of this attempt (grows with each attempt)."""
    payment_intent: str | None
    checkout_session_id: str | None
    client_reference_id: str | None
    customer: str | None
    customer_email: str | None
    customer_name: str | None
    shipping: Shipping | None
    """Where to ship: the Checkout Session's shipping details, else the PaymentIntent's
    ``shipping``; None when neither had any."""
    charge: str | None
    invoice_id: str | None
    subscription: str | None
    amount: int | None
    """The amount paid in the currency's smallest unit (cents): 0 for a purchase a coupon or
    trial made free; None when no event said (a thin event paid it). In a fulfilment again
    after a dispute won (``refulfil:`` key), what it grants again (docs/REVERSAL.md)."""
    refunded_amount: int
    """What the ledger had counted as refunded when this attempt began (pending refunds
    too), in the same unit; 0 when nothing. A refund in full before the call means no call,
    so this is a partial refund. To tell, not to compute a grant from: it may differ
    between attempts of one key, and a refund counted may still fail. To take partial
    refunds back, set REVERSAL_PER_REFUND: each is reversed on its own once this call has
    succeeded, and one that fails after its reversal is held for a person; grant
    ``amount``."""
    currency: str | None
    livemode: bool
    paid_by: PaidBy
    event_ids: list[str]
    """The Stripe events recorded for the payment, in the order they arrived."""
    checkout_session: CheckoutSession | None
    invoice: Invoice | None
    line_items: list[LineItem] | None
    """Checkout's line items, read once from Stripe's API (CHECKOUT_LINE_ITEMS), else None."""
    metadata: PurchaseMetadata


class RefundTaken(TypedDict):
    """One refund counted for the payment, as its latest event said it."""

    id: str
    amount: int
    reason: str | None
    """Stripe's: ``duplicate``, ``fraudulent``, ``requested_by_customer``,
    ``expired_uncaptured_charge``, or None (none given)."""
    metadata: dict[str, str]
    """What your refund's metadata says (``{"line_item": "li_…"}``: what to take back)."""


class Reversal(TypedDict):
    """Why a reversal call is made and what it takes back. The same fields as
    ``ledger.reversals.Reversal``, which builds it (tests/unit/test_api.py)."""

    why: str
    """``refund`` (refunded in full, or with REVERSAL_PER_REFUND one refund) or ``dispute``
    (a dispute closed as lost)."""
    refund_ids: list[str]
    """The refunds Stripe counted for the payment (a failed or canceled one is not)."""
    refunds: list[RefundTaken]
    """The same refunds, each with its amount, reason and metadata."""
    refunded_amount: int
    """What was refunded in all, in the currency's smallest unit."""
    dispute_id: str | None
    dispute_status: str | None
    dispute_reason: str | None
    """The dispute's ``reason`` (``fraudulent``, ``product_not_received``…)."""
    refund_id: str | None
    """The refund this reversal is for (REVERSAL_PER_REFUND); None: the whole payment, or
    what remains of it."""
    refund_reason: str | None
    refund_metadata: dict[str, str] | None
    """That refund's ``reason`` and ``metadata``; None without a ``refund_id``."""
    amount: int | None
    """What this reversal takes back: the refund's amount, else what remains (0 when the
    refunds, reversed one by one before the amount paid was known, took it all: with no
    ``refund_id`` it still says the payment is taken back in full); None when the amount
    paid is not known (only a thin event paid it): what remains, whatever it is."""


class ReversalCall(Purchase):
    """What a REVERSAL_ACTION receives: the purchase, with ``idempotency_key``
    ``reverse:<payment_key>`` (``reverse:<payment_key>:<refund_id>`` for one refund; never the
    fulfilment's), and the reversal. A REVERSAL_SQL gets its fields as ``%(reversal_amount)s``,
    ``%(reversal_refund_id)s``..."""

    reversal: Reversal
