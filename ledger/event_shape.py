"""What every Stripe event has, and where its parts are: ``check_shape`` refuses a body that
is not a Stripe event; ``is_thin``, ``data_object`` and ``related`` read a snapshot event or a
thin one.

Apart from ledger/events.py, which says what an event means for a payment: this is only the
envelope, which the intake (and reconcile) check before anything is classified.
"""

from typing import Any

Obj = dict[str, Any]

THIN_OBJECT = "v2.core.event"


class NotAStripeEvent(Exception):
    """Valid JSON that lacks what every Stripe event has (evt_ id, type, data.object)."""


def is_thin(event: Obj) -> bool:
    return event.get("object") == THIN_OBJECT


def data_object(event: Obj) -> Obj:
    """The event's ``data.object``; empty for a thin event, which has none."""
    data = event.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    return obj if isinstance(obj, dict) else {}


def related(event: Obj) -> tuple[str, str]:
    """A thin event's related object as (type, id); ('', '') when it names none."""
    ref = event.get("related_object")
    if not isinstance(ref, dict):
        return "", ""
    return str(ref.get("type") or ""), str(ref.get("id") or "")


def check_shape(event: object) -> Obj:
    """Return the event if it looks like a Stripe event, else raise NotAStripeEvent."""
    if not isinstance(event, dict):
        raise NotAStripeEvent("body is not a JSON object")
    event_id, event_type, data = event.get("id"), event.get("type"), event.get("data")
    if not isinstance(event_id, str) or not event_id.startswith("evt_") or len(event_id) > 255:
        raise NotAStripeEvent("no evt_ id")
    if not isinstance(event_type, str) or not event_type or len(event_type) > 255:
        raise NotAStripeEvent("no type")
    if is_thin(event):
        _check_related(event.get("related_object"))
    elif not isinstance(data, dict) or not isinstance(data.get("object"), dict):
        raise NotAStripeEvent("no data.object")
    return event


def _check_related(ref: object) -> None:
    """A thin event's related object, if any: a type, and an id unless it is a singleton."""
    if ref is None:
        return
    if not isinstance(ref, dict):
        raise NotAStripeEvent("related_object is not an object")
    kind, ref_id = ref.get("type"), ref.get("id")
    if not isinstance(kind, str) or not kind or len(kind) > 255:
        raise NotAStripeEvent("related_object without a type")
    if ref_id is not None and (not isinstance(ref_id, str) or not ref_id or len(ref_id) > 255):
        raise NotAStripeEvent("related_object id is not an id")
