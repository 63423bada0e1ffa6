"""A Checkout Session's line items: read once from Stripe's API (CHECKOUT_LINE_ITEMS), kept
compactly with the payment (``p_items``) and given back as the purchase's ``line_items``."""

from typing import Any

import msgspec
import orjson


class LineItem(msgspec.Struct, kw_only=True, frozen=True):
    """One of a Checkout Session's line items, fetched once from Stripe's API. The last six
    of LINE_ITEM_FIELDS came later: None in line items kept before them."""

    id: str | None
    """Stripe's line item (``li_…``): a row of yours per item can be keyed by it."""
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
    """The price's ``metadata`` (what a grant per item may read: credits, a plan)."""


LINE_ITEM_FIELDS = (
    "price",
    "product",
    "quantity",
    "unit_amount",
    "amount_total",
    "currency",
    "description",
    "id",
    "amount_subtotal",
    "amount_discount",
    "amount_tax",
    "price_lookup_key",
    "price_metadata",
)
"""A line item as kept (``p_items``): one JSON array of these per item, in this order (a
row kept before the last six has the first seven)."""


def pack_line_items(items: list[dict[str, Any]]) -> str:
    """Line items as Stripe's API answers them, kept compactly, by position
    (LINE_ITEM_FIELDS)."""
    rows = []
    for item in items:
        price = item.get("price")
        price = price if isinstance(price, dict) else {}
        product = price.get("product")
        product = product.get("id") if isinstance(product, dict) else product
        metadata = price.get("metadata")
        rows.append(
            [
                price.get("id"),
                product,
                item.get("quantity"),
                price.get("unit_amount"),
                item.get("amount_total"),
                item.get("currency"),
                item.get("description"),
                item.get("id"),
                item.get("amount_subtotal"),
                item.get("amount_discount"),
                item.get("amount_tax"),
                price.get("lookup_key"),
                metadata if isinstance(metadata, dict) and metadata else None,
            ]
        )
    return orjson.dumps(rows).decode()


def line_items_of(packed: str | None) -> list[LineItem] | None:
    if not packed:
        return None
    try:
        rows = msgspec.convert(orjson.loads(packed), list[list[Any]])
        width = len(LINE_ITEM_FIELDS)  # a row kept before the last fields: None for them
        named = [
            dict(zip(LINE_ITEM_FIELDS, row + [None] * (width - len(row)), strict=False))
            for row in rows
        ]
        return msgspec.convert(named, list[LineItem])
    except (orjson.JSONDecodeError, msgspec.ValidationError):
        return None
