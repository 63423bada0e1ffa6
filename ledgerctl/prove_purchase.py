"""What prove-action's purchases carry, so a merchant's effect runs on them as on real ones:
metadata, a reference and an email that say where they came from (the rows it leaves in
your downstream), and Checkout line items that add up to the amount paid (it reads nothing
from Stripe's API, so it gives every purchase the line items a Checkout Session's would
have: an effect that grants per line item is proven on the path it takes)."""

from typing import Any

from ledger.money import paid_amount
from ledger.purchase_fields import purchase_fields
from ledger.purchase_line_items import pack_line_items

PROVE_EMAIL = "prove-action@example.com"
"""The email of every purchase prove-action makes (example.com: reserved, never delivered)."""
PROVE_METADATA = {"webhook_ledger_prove": "1"}
"""On each purchase and on each line item's price: whose rows these are."""


def marked(event: dict[str, object]) -> None:
    """What a merchant's effect may require, filled with values that say where they came from
    (the rows prove-action leaves in your downstream): metadata ``webhook_ledger_prove``, an
    order reference and an email on the objects that carry them."""
    obj = event["data"]["object"]  # type: ignore[index]
    obj["metadata"] = {**PROVE_METADATA, "order_id": f"prove-{obj['id']}"}
    if obj.get("object") == "checkout.session":
        obj["client_reference_id"] = f"prove-{obj['id']}"
        obj.setdefault("customer_details", {})["email"] = PROVE_EMAIL
    elif obj.get("object") in ("payment_intent", "charge"):
        obj["receipt_email"] = PROVE_EMAIL
    elif obj.get("object") == "invoice":
        obj["customer_email"] = PROVE_EMAIL


def line_items(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Two line items as Stripe's API answers them for a Checkout Session (``li_prove_1_…``,
    ``li_prove_2_…``), whose totals add up to what ``obj`` says was paid."""
    paid = paid_amount(obj) or 0
    currency = obj.get("currency") if isinstance(obj.get("currency"), str) else "usd"
    second = paid // 3
    items = []
    for n, (quantity, total) in enumerate(((2, paid - second), (1, second)), start=1):
        price = {
            "id": f"price_prove_{n}",
            "product": f"prod_prove_{n}",
            "unit_amount": total // quantity,
            "lookup_key": f"prove_{n}",
            "metadata": dict(PROVE_METADATA),
        }
        items.append(
            {
                "id": f"li_prove_{n}_{obj['id']}",
                "price": price,
                "quantity": quantity,
                "amount_total": total,
                "amount_subtotal": total,
                "amount_discount": 0,
                "amount_tax": 0,
                "currency": currency,
                "description": f"prove-action item {n}",
            }
        )
    return items


def purchase_fields_of(event: dict[str, Any]) -> dict[str, str]:
    """The purchase fields a paid event of prove-action's gives its payment: its object's,
    and the line items (``p_items``) as if read from Stripe's API."""
    obj = event["data"]["object"]
    return purchase_fields(obj) | {"p_items": pack_line_items(line_items(obj))}
