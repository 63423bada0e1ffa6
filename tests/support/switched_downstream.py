"""The soak's downstream: the built-in SQLite order system behind a switch, as
``module:function`` actions (``fulfil``; ``reverse`` for REVERSAL_ACTION). While the file
SWITCHED_DOWNSTREAM_DOWN names exists, every call is refused the way an HTTP downstream
that is down answers (a 503: nothing applied), which the workers' circuit breaker counts;
remove the file and it is back."""

import os
from typing import Any

import msgspec

from ledger.purchase import Purchase
from ledger.reversals import ReversalCall
from workers.actions import SqliteAction
from workers.exceptions import TransientDownstreamError

_orders: SqliteAction | None = None


def fulfil(call: dict[str, Any]) -> dict[str, Any]:
    global _orders
    if os.path.exists(os.environ["SWITCHED_DOWNSTREAM_DOWN"]):
        raise TransientDownstreamError("http 503: the downstream is down (soak)", down=True)
    if _orders is None:
        _orders = SqliteAction(os.environ["SWITCHED_DOWNSTREAM_PATH"])
    return _orders(msgspec.convert(call, Purchase))


fulfil.replay_safe = True  # type: ignore[attr-defined]


def reverse(call: dict[str, Any]) -> dict[str, Any]:
    """The reversal (REVERSAL_ACTION), into the same order system behind the same switch."""
    global _orders
    if os.path.exists(os.environ["SWITCHED_DOWNSTREAM_DOWN"]):
        raise TransientDownstreamError("http 503: the downstream is down (soak)", down=True)
    if _orders is None:
        _orders = SqliteAction(os.environ["SWITCHED_DOWNSTREAM_PATH"])
    return _orders(msgspec.convert(call, ReversalCall))


reverse.replay_safe = True  # type: ignore[attr-defined]
