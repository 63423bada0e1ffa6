"""What your own fulfilment code imports: the purchase it is given, the exceptions it raises,
and how it says it is replay-safe. One module, typed (``mypy --strict`` clean; see
``examples/actions.py``).

Two kinds of code of yours can fulfil a payment:

- **An action**, ``FULFILMENT_ACTION=module:function``: ``function(purchase) -> receipt``.
  It does the effect wherever it likes (an API, a database, a file).
- **An effect**, ``FULFILMENT_EFFECT=module:function`` with the built-in SQLite or
  PostgreSQL downstream: ``function(conn, purchase) -> receipt``, run inside the
  transaction that records the payment's key, on that transaction's connection (sqlite3's
  or psycopg's). It must not commit or roll back.

A reversal (``REVERSAL_ACTION=module:function``, docs/REVERSAL.md) is an action too:
``function(call) -> receipt`` with a :class:`ReversalCall`, the purchase with its own
``idempotency_key`` and the ``reversal`` (why, which refund, how much).

What each choice promises (README, "Guarantees"):

=====================================  ===================================================
the action                             a worker dies or stalls during the call
=====================================  ===================================================
an effect (SQLite or PostgreSQL)       exactly one effect, without a person: the key and
                                       the effect commit together; a re-run finds the key
an action marked :func:`replay_safe`   re-run with the same ``idempotency_key``: exactly
(or ``FULFILMENT_REPLAY_SAFE=true``)   one effect *if* your code applies one per key
an action, not replay-safe (default)   at most once: the payment waits as ``interrupted``
                                       for a person (``webhook-ledger resolve``)
=====================================  ===================================================

The exceptions, whoever raises them (anything else an action raises, ``sys.exit()`` and
KeyboardInterrupt included, means "unknown how far it got": retried only when replay-safe,
else ``interrupted``, and an exception is taken for a bug: the payment's error names where
in your code it was raised, ``KeyError: 'x' (at shop/actions.py:42 in grant)``, and the
worker logs its traceback, credentials masked; anything else an effect raises is rolled
back, so it is retried, and said and logged the same way):

- :class:`RetryLater`: this payment, later, with backoff, up to ``MAX_ATTEMPTS``, then
  ``failed``.
- :class:`GiveUp`: this payment cannot be fulfilled as it is: ``failed`` at once, for a
  person (``webhook-ledger retry`` once fixed).
- :class:`DownstreamDown`: the downstream as a whole is unavailable: counted by the circuit
  breaker, which holds every worker back (``retry_after``: seconds it asked to wait). By
  default the request may have reached it (a gateway's 502, a read timeout): whether it
  applied is unknown, as for any other exception. ``sent=False``: it applied nothing (it
  never left, or the downstream refused it: a 503 for maintenance); no attempt is spent
  while the downstream answers no other payment (an outage). For one payment or product
  alone, raise ``RetryLater``: a ``DownstreamDown`` of one payment is one witness however
  often, and spends its attempts once another payment is answered.

``RetryLater``, ``GiveUp`` and ``DownstreamDown(sent=False)`` say the call applied nothing.
Raise them only when that is so: a payment refunded in full after such refusals alone ends
``refunded_unfulfilled``, its reversal never called. When the call may have applied, raise
``DownstreamDown()`` or let your client's exception through: retried when replay-safe, else
``interrupted``, and refunded in full it is ``held`` for a person to look.
"""

from collections.abc import Callable
from typing import Any, TypeVar

from workers.exceptions import PermanentDownstreamError, TransientDownstreamError
from workers.purchase_types import (
    Address,
    CheckoutSession,
    CustomerDetails,
    CustomField,
    Invoice,
    InvoiceLine,
    LineItem,
    LinePeriod,
    PaidBy,
    Purchase,
    PurchaseMetadata,
    RefundTaken,
    Reversal,
    ReversalCall,
    Shipping,
)

__all__ = [
    "Action",
    "Address",
    "CheckoutSession",
    "CustomerDetails",
    "CustomField",
    "DownstreamDown",
    "Effect",
    "GiveUp",
    "Invoice",
    "InvoiceLine",
    "LineItem",
    "LinePeriod",
    "PaidBy",
    "Purchase",
    "PurchaseMetadata",
    "Receipt",
    "RefundTaken",
    "replay_safe",
    "RetryLater",
    "Reversal",
    "ReversalAction",
    "ReversalCall",
    "Shipping",
]


Receipt = dict[str, Any]
"""What your code returns: a small JSON-able dict, stored with the payment (and, for an
effect, with its key: a re-run answers it); a value JSON has no type for (a Decimal, a
datetime) is stored as its text, anything but a dict as ``{"result": …}``."""

Action = Callable[[Purchase], Receipt | None]
"""``FULFILMENT_ACTION=module:function``."""

ReversalAction = Callable[[ReversalCall], Receipt | None]
"""``REVERSAL_ACTION=module:function``."""

Effect = Callable[[Any, Purchase], Receipt | None]
"""``FULFILMENT_EFFECT=module:function``: the connection is sqlite3's or psycopg's."""


class RetryLater(TransientDownstreamError):
    """Not now, and nothing applied: retry this payment later (backoff, up to MAX_ATTEMPTS,
    then ``failed``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


class GiveUp(PermanentDownstreamError):
    """This payment cannot be fulfilled as it is, and nothing applied: ``failed`` now, for
    a person."""


class DownstreamDown(TransientDownstreamError):
    """The downstream as a whole is unavailable: the circuit breaker counts it and holds
    every worker back, ``retry_after`` seconds at least when given. ``sent`` (the default):
    the request may have reached it, so the call may have applied (retried when
    replay-safe, else ``interrupted``); ``sent=False``: it applied nothing (never left, or
    refused), no attempt spent."""

    def __init__(self, message: str, retry_after: float = 0.0, sent: bool = True) -> None:
        super().__init__(message, down=True, sent=sent, retry_after=retry_after)


F = TypeVar("F", bound=Callable[..., Any])


def replay_safe(fn: F) -> F:
    """Declare an action replay-safe: calling it twice with the same ``idempotency_key`` has
    one effect. An interrupted call is then re-run by itself instead of waiting for a
    person; if your code is not in fact idempotent, that re-run is a second effect."""
    marked: Any = fn
    marked.replay_safe = True
    return fn
