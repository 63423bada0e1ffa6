"""A Checkout Session's payment as a merchant's success page polls it (ledger/landing.py):
found by the session's id, which the ledger keeps as an alias of its payment (or as the
payment's own key, for a session that took no PaymentIntent)."""

from datetime import datetime
from typing import Any, cast

from redis import Redis

from ledger import keys
from ledger.purchase import session_status
from ledger.read.base import View
from ledger.read.payments import PaymentState
from ledger.read.timeline import receipt_of
from ledger.stored import ms_time, optional, text

FIELDS = ("state", "fulfilled_at", "receipt", "waiting", "p_cs_ref", "p_cs_status", "paid_by")


class SessionFulfilment(View):
    session_id: str
    payment_key: str
    state: PaymentState
    """The payment's state: queued (due, waiting for a worker), in_progress, retrying,
    fulfilled, or failed, interrupted, held (a person decides)."""
    fulfilled_at: datetime | None
    receipt: dict[str, Any] | None
    """The action's receipt, once fulfilled."""
    waiting: str | None
    """Why a payment due waits without a call (as a payment's ``waiting``)."""
    client_reference_id: str | None
    payment_status: str | None
    """The session's ``payment_status``: as Stripe's API answered this request, else as the
    ledger recorded it (the session's event, or an earlier read through the API; ``paid``
    once the payment is, as the purchase says); null while
    the ledger has no record of the session itself (its payment known by another id)."""
    recorded: bool
    """Whether this request recorded the session in the ledger (source ``api``)."""


def session_payment(redis: Redis, session_id: str) -> str | None:
    """The key of the payment a Checkout Session belongs to, if the ledger has one."""
    pipe = redis.pipeline(transaction=False)
    pipe.get(keys.alias(session_id))
    pipe.exists(keys.payment(session_id))
    alias, own = pipe.execute()
    if alias is not None:
        return alias.decode()
    return session_id if own else None


def session_fulfilment(
    redis: Redis, session_id: str, payment_status: str | None = None, recorded: bool = False
) -> SessionFulfilment | None:
    """The state of the session's payment, or None when the ledger has no payment for it."""
    payment_key = session_payment(redis, session_id)
    if payment_key is None:
        return None
    values = redis.hmget(keys.payment(payment_key), FIELDS)
    f = {name: text(v) for name, v in zip(FIELDS, values, strict=True) if v is not None}
    if "state" not in f:  # purged between the two reads
        return None
    return SessionFulfilment(
        session_id=session_id,
        payment_key=payment_key,
        state=cast(PaymentState, f["state"]),
        fulfilled_at=ms_time(f.get("fulfilled_at")),
        receipt=receipt_of(f.get("receipt")),
        waiting=optional(f.get("waiting")),
        client_reference_id=optional(f.get("p_cs_ref")),
        payment_status=payment_status or session_status(f),
        recorded=recorded,
    )
