"""What a payment's refunds add up to, from the fields its refund events left on its hash
(``rf``, ``rf_charge``, ``rf_charge_at``, ``rf_failed``: ledger/reversals.py ``taken_of``)."""

import msgspec
import orjson

from ledger.stored import whole


def refunded_amount(stored: dict[str, str]) -> int:
    """What the payment hash's fields say was refunded (refunds.lua's refund_total): the
    refunds counted by id, or the latest charge event's ``amount_refunded`` if larger, less
    the refunds it counted that failed since (made by then, said failed after it)."""
    counted = sum(amount for amount in int_map(stored.get("rf")).values() if amount > 0)
    charged = whole(stored.get("rf_charge")) or 0
    at = whole(stored.get("rf_charge_at")) or 0
    try:
        failed = orjson.loads(stored.get("rf_failed") or "{}")
    except orjson.JSONDecodeError:
        failed = {}
    for amount, made, failed_at in failed.values() if isinstance(failed, dict) else ():
        if 0 < at and made <= at < failed_at:
            charged -= amount
    return max(counted, charged)


def int_map(field: str | None) -> dict[str, int]:
    """A JSON object of whole numbers by id, as a payment hash keeps refunds (``rf``, ``rv``);
    {} when it is not one."""
    try:
        return msgspec.convert(orjson.loads(field or "{}"), dict[str, int])
    except (orjson.JSONDecodeError, msgspec.ValidationError):
        return {}
