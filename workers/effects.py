"""The user's effect inside a built-in downstream's transaction (SQLite or PostgreSQL):
FULFILMENT_SQL (one statement, or ``@path`` of a file holding it) or FULFILMENT_EFFECT
(``module:function`` called as ``effect(conn, purchase)``). The same SQL text runs on both
databases: psycopg's named parameters (``%(payment_key)s``, ``%%`` for a literal ``%``),
turned into sqlite3's (``:payment_key``) for SQLite. Whatever the effect returns (a SQL
statement: how many rows it touched, with its first row's columns) is the receipt, stored
with the key so a re-run answers the first call's receipt.
"""

import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from ledger.purchase import Purchase
from ledger.purchase import purchase_of as sample_purchase
from ledger.purchase_shipping import address_json, shipping_json
from ledger.reversals import reversal_of
from ledger.settings import Settings
from workers.exceptions import ActionConfigError
from workers.merchant_code import unexpected

Receipt = dict[str, Any]
Params = dict[str, Any]

_NAMED = re.compile(r"%\((\w+)\)s|%%")
ROWCOUNT = "rowcount"
"""The receipt's field saying how many rows a SQL effect touched. 0 is no error (an ``ON
CONFLICT DO NOTHING`` may rightly touch none) but is logged as a warning: a WHERE that never
matches looks the same."""
log = logging.getLogger("workers.effects")


class Cursor(Protocol):
    """What both drivers' cursors have: the columns of a row-returning statement."""

    @property
    def description(self) -> Any: ...

    @property
    def rowcount(self) -> int: ...

    def fetchall(self) -> Any: ...


class Connection(Protocol):
    def execute(self, query: Any, params: Any = ...) -> Any: ...


_SAMPLE_ADDRESS = {
    "line1": "1 Main St",
    "city": "Springfield",
    "state": "IL",
    "postal_code": "62701",
    "country": "US",
}
_SAMPLE = sample_purchase(
    "pi_check",
    1,
    {
        "amount": "2000",
        "currency": "usd",
        "livemode": "0",
        "events": "evt_check",
        "paid_by": "evt_check",
        "paid_type": "payment_intent.succeeded",
        "p_customer": "cus_check",
        "p_charge": "ch_check",
        "p_cs": "cs_check",
        "p_cs_ref": "order_check",
        "p_cs_email": "buyer@example.com",
        "p_cs_name": "A Buyer",
        "p_cs_phone": "+15555550100",
        "p_cs_addr": address_json(_SAMPLE_ADDRESS),
        "p_cs_ship": shipping_json({"name": "A Buyer", "address": _SAMPLE_ADDRESS}),
        "p_in": "in_check",
        "p_sub": "sub_check",
    },
)
SAMPLE: dict[str, Any] = _SAMPLE.to_dict()
"""A purchase of the right types, with every field an action receives: FULFILMENT_SQL is
checked with it at start-up (planned, never applied)."""
SAMPLE_REVERSAL: dict[str, Any] = reversal_of(
    _SAMPLE,
    {"rf": '{"re_check": 2000}', "reversal_why": "refund", "reversal_refund": "re_check"}
    | {"reversal_amount": "2000"},
).to_dict()
"""The same for a reversal call: REVERSAL_SQL is checked with it."""


def purchase_of(call: object) -> dict[str, Any]:
    """What the action receives (ledger.purchase.Purchase, or a dict) as the purchase dict
    a ``module:function`` effect is given."""
    if isinstance(call, Purchase):
        return call.to_dict()
    if is_dataclass(call) and not isinstance(call, type):
        return asdict(call)
    return dict(call)  # type: ignore[call-overload]


def sql_params(call: object) -> Params:
    """The purchase as SQL named parameters: every top-level scalar as it is, a nested value
    (a list, a dict) as its JSON text (PostgreSQL: ``%(line_items)s::jsonb``); a reversal
    call's ``reversal`` also field by field, ``%(reversal_amount)s``, ``%(reversal_why)s``."""
    fields = purchase_of(call)
    reversal = fields.get("reversal")
    named = {f"reversal_{k}": v for k, v in reversal.items()} if isinstance(reversal, dict) else {}
    return {
        name: json.dumps(value, sort_keys=True) if isinstance(value, list | dict) else value
        for name, value in (fields | named).items()
    }


def for_sqlite(sql: str) -> str:
    """psycopg's ``%(name)s`` as sqlite3's ``:name``, ``%%`` as ``%``."""
    return _NAMED.sub(lambda m: f":{m[1]}" if m[1] else "%", sql)


def statement_receipt(cursor: Cursor) -> tuple[Receipt, int]:
    """A statement's receipt and how many rows it touched: the count as ``rowcount``, with
    its first row's columns when rows came back (``RETURNING``; a column of that name is
    kept as it is). Every row is fetched: sqlite3 counts a ``RETURNING`` statement's rows
    only once it has stepped through them all, and a SELECT's not at all (-1)."""
    if not cursor.description:
        return {ROWCOUNT: cursor.rowcount}, cursor.rowcount
    rows = cursor.fetchall()
    touched = cursor.rowcount if cursor.rowcount >= 0 else len(rows)
    names = [column[0] for column in cursor.description]
    first = dict(zip(names, rows[0], strict=False)) if rows else {}
    return as_receipt(first | ({} if ROWCOUNT in first else {ROWCOUNT: touched})), touched


def as_receipt(result: object) -> Receipt:
    """What a function returned, as a receipt the ledger stores (a dict, else
    ``{"result": …}``; a Decimal or a datetime as its text). One orjson, the ledger's encoder,
    refuses (an integer beyond 64 bits, a lone surrogate, a key that is no string) is kept
    whole as ``{"unstorable": ascii(…)}``: the call has applied, its receipt must not end the
    job."""
    found = result if isinstance(result, dict) else {"result": result}
    try:
        receipt: Receipt = json.loads(json.dumps(found, default=str))
        orjson.dumps(receipt)
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        return {"unstorable": ascii(result)}
    return receipt


@dataclass(frozen=True)
class Effect:
    """One user effect: SQL text or a function, and the setting it came from."""

    setting: str
    sql: str = ""
    function: Callable[[Any, dict[str, Any]], Any] | None = None

    def run(self, conn: Connection, call: object, sqlite: bool = False) -> Receipt:
        """The effect on ``conn``, inside the caller's open transaction."""
        if self.function is not None:
            return as_receipt(self.function(conn, purchase_of(call)))
        query = for_sqlite(self.sql) if sqlite else self.sql
        params = sql_params(call)
        receipt, touched = statement_receipt(conn.execute(query, params))
        if touched == 0:
            what = "reversal" if self.setting.startswith("REVERSAL") else "fulfilment"
            pk, key = params.get("payment_key"), params.get("idempotency_key")
            log.warning("the %s of %s touched no row (%s, key %s)", what, pk, self.setting, key)
        return receipt

    def raised(self, exc: Exception, call: object, secrets: Sequence[str] = ()) -> str:
        """What the payment's error says of ``exc``, raised while the effect ran and none of
        the database's nor of workers/api.py's: a function's bug says where in it, and its
        traceback is logged, ``secrets`` masked too (workers/merchant_code.py)."""
        if self.function is None:
            return f"{type(exc).__name__}: {exc}"
        target = f"{self.function.__module__}:{self.function.__qualname__}"
        return unexpected(exc, target, call, secrets)


def load_effect(s: Settings) -> Effect | None:
    """The effect FULFILMENT_SQL or FULFILMENT_EFFECT names (None: neither is set); raises
    ActionConfigError naming the setting when the file cannot be read or the function
    cannot be imported."""
    if s.FULFILMENT_SQL:
        return Effect("FULFILMENT_SQL", sql=sql_text(s.FULFILMENT_SQL))
    if s.FULFILMENT_EFFECT:
        return Effect("FULFILMENT_EFFECT", function=imported(s.FULFILMENT_EFFECT))
    return None


def load_reversal_effect(s: Settings) -> Effect | None:
    """The effect REVERSAL_SQL or REVERSAL_EFFECT names for a built-in REVERSAL_ACTION
    (None: neither is set); raises ActionConfigError naming the setting, as load_effect."""
    if s.REVERSAL_SQL:
        return Effect("REVERSAL_SQL", sql=sql_text(s.REVERSAL_SQL, "REVERSAL_SQL"))
    if s.REVERSAL_EFFECT:
        return Effect("REVERSAL_EFFECT", function=imported(s.REVERSAL_EFFECT, "REVERSAL_EFFECT"))
    return None


def sample_for(effect: Effect) -> dict[str, Any]:
    """The sample call an effect is checked with at start-up."""
    return SAMPLE_REVERSAL if effect.setting.startswith("REVERSAL") else SAMPLE


def sql_text(value: str, setting: str = "FULFILMENT_SQL") -> str:
    """The statement itself, or the contents of the file ``@path`` names."""
    if not value.startswith("@"):
        return value
    try:
        text = Path(value[1:]).read_text()
    except OSError as exc:
        why = f"cannot read {value[1:]}: {exc.strerror}"
        raise ActionConfigError(why, setting) from exc
    if not text.strip():
        raise ActionConfigError(f"{value[1:]} is empty", setting)
    return text


def imported(target: str, setting: str = "FULFILMENT_EFFECT") -> Callable[..., Any]:
    """The function ``module:function`` names; raises ActionConfigError naming ``setting``,
    also when importing the module raises something else (the user's module reading a
    variable that is not set, a syntax error): one line, never a traceback. The module is
    looked for on ``sys.path``, then in the working directory, as ``rq worker`` (its
    ``--path .``) and ``python -m`` find it: a merchant's module beside the Procfile is found
    by ``fulfilment-worker`` and ``webhook-ledger``, console scripts whose ``sys.path`` holds
    their own folder instead."""
    module, _, name = target.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ActionConfigError(f"cannot import {target}: {exc}", setting) from exc
    except Exception as exc:  # raised by the module's own code as it ran
        why = f"cannot import {target}: importing it raised {type(exc).__name__}: {exc}"
        raise ActionConfigError(why, setting) from exc
    if not callable(found):
        raise ActionConfigError(f"{target} is not callable", setting)
    fn: Callable[..., Any] = found
    return fn
