"""The soak's downstream: the built-in SQLite order system behind a switch, as
``module:function`` actions (``fulfil``, which settles with ``settle``; ``reverse`` for
REVERSAL_ACTION). While the file SWITCHED_DOWNSTREAM_DOWN names exists, every call is
refused the way an HTTP downstream that is down answers (a 503: nothing applied), which the
workers' circuit breaker counts; remove the file and it is back."""

import os
from typing import Any

import msgspec

from ledger.purchase import Purchase
from ledger.reversals import ReversalCall
from workers import api
from workers.actions import SqliteAction
from workers.api import replay_safe, settled_by
from workers.exceptions import TransientDownstreamError

_orders: dict[str, SqliteAction] = {}
"""The order system of each SWITCHED_DOWNSTREAM_PATH this process was given (one per test
that runs these actions in-process; one in a soak's worker)."""


def _order_system() -> SqliteAction:
    """The order system, or the refusal of a downstream that is down."""
    if os.path.exists(os.environ["SWITCHED_DOWNSTREAM_DOWN"]):
        raise TransientDownstreamError("http 503: the downstream is down (soak)", down=True)
    path = os.environ["SWITCHED_DOWNSTREAM_PATH"]
    if path not in _orders:
        _orders[path] = SqliteAction(path)
    return _orders[path]


def settle(call: api.Purchase) -> dict[str, Any]:
    """A payment taken back after a call with no answer: its order found, or its key voided,
    in the same order system behind the same switch."""
    return _order_system().settle(msgspec.convert(call, Purchase))


@replay_safe
@settled_by(settle)
def fulfil(call: dict[str, Any]) -> dict[str, Any]:
    return _order_system()(msgspec.convert(call, Purchase))


@replay_safe
def reverse(call: dict[str, Any]) -> dict[str, Any]:
    """The reversal (REVERSAL_ACTION), into the same order system behind the same switch."""
    return _order_system()(msgspec.convert(call, ReversalCall))
