"""A Checkout Session's line items: read once from Stripe's API (CHECKOUT_LINE_ITEMS), kept
compactly with the payment (``p_items``) and given back as the purchase's ``line_items``."""

from typing import Any

import msgspec
import orjson


class LineItem(msgspec.Struct, kw_only=True, frozen=True):
    """One of a Checkout Session's line items, fetched once from Stripe's API."""

    price: str | None
    product: str | None
    quantity: int | None
    unit_amount: int | None
    amount_total: int | None
    currency: str | None
    description: str | None


LINE_ITEM_FIELDS = (
    "price",
    "product",
    "quantity",
    "unit_amount",
    "amount_total",
    "currency",
    "description",
)
"""A line item as kept (``p_items``): one JSON array of these per item, in this order."""


def pack_line_items(items: list[dict[str, Any]]) -> str:
    """Line items as Stripe's API answers them, kept compactly: price, product, quantity,
    unit and total amounts, currency and description, by position."""
    rows = []
    for item in items:
        price = item.get("price")
        price = price if isinstance(price, dict) else {}
        product = price.get("product")
        product = product.get("id") if isinstance(product, dict) else product
        rows.append(
            [
                price.get("id"),
                product,
                item.get("quantity"),
                price.get("unit_amount"),
                item.get("amount_total"),
                item.get("currency"),
                item.get("description"),
            ]
        )
    return orjson.dumps(rows).decode()


def line_items_of(packed: str | None) -> list[LineItem] | None:
    if not packed:
        return None
    try:
        rows = msgspec.convert(orjson.loads(packed), list[list[Any]])
        named = [dict(zip(LINE_ITEM_FIELDS, row, strict=False)) for row in rows]
        return msgspec.convert(named, list[LineItem])
    except (orjson.JSONDecodeError, msgspec.ValidationError):
        return None
