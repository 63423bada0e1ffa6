"""One payment's story as people read it: its events in the order they were first recorded,
its attempts (``attempt:{token}`` JSON records in the payment hash) as objects, its receipt
and a person's decision."""

from datetime import datetime
from typing import Any, Literal, cast, get_args

import orjson

from ledger.read.base import View
from ledger.stored import count, ms_time, optional, whole

Leg = Literal["fulfil", "reverse", "refulfil", "settle"]
"""Which action a payment's state or an attempt is about: its fulfilment, its reversal, its
fulfilment again after a dispute won (REVERSAL_DISPUTE_WON=fulfil), or its settlement (taken
back after an attempt that may have applied: the built-in action finds its key or voids it)."""
LEGS: tuple[Leg, ...] = get_args(Leg)
LEG_NAMES: dict[Leg, str] = {
    "fulfil": "fulfilment",
    "reverse": "reversal",
    "refulfil": "fulfilment again",
    "settle": "settlement",
}
"""A leg in words, wherever a person reads it (the dashboard, ``webhook-ledger``)."""
DONE_WORDS: dict[Leg, str] = {
    "fulfil": "fulfilled",
    "reverse": "reversed",
    "refulfil": "fulfilled again",
    "settle": "found applied",
}
"""An attempt's ``fulfilled`` outcome in words by its leg: its action's call did what the leg
asked (a reversal reversed, a settlement found the effect applied)."""


def outcome_words(leg: Leg, outcome: str, spent: bool = False) -> str:
    """An attempt's outcome as a person reads it (the API keeps the stored one); ``spent``:
    the last attempt of a payment that then failed, its worker's ``retry`` refused for want
    of attempts (MAX_ATTEMPTS)."""
    if outcome == "retry" and spent:
        return "retry: no attempt left (failed)"
    return DONE_WORDS[leg] if outcome == "fulfilled" else outcome.replace("_", " ")


FINISHED_OUTCOMES = frozenset(
    {"fulfilled", "retry", "failed", "interrupted", "not_called", "voided", "held"}
)
"""The outcomes a worker writes when it finishes its attempt: FINISHED in lua/prelude.lua."""
LEDGER_ENDED = frozenset({"taken_back", "same_purchase", "lease_expired", "stale_before_call"})
"""The outcomes the ledger writes when it ends an attempt itself (start, fence, sweeper)."""


class PaymentEvent(View):
    id: str
    expired: bool
    type: str | None
    role: str | None
    pays: bool
    paid_the_payment: bool
    deliveries: int | None
    first_recorded_at: datetime | None
    last_delivered_at: datetime | None


class Attempt(View):
    token: int
    outcome: str
    started_at: datetime | None
    call_started_at: datetime | None
    ended_at: datetime | None
    duration_ms: int | None
    call_ms: float | None
    error: str | None
    late: bool
    phase_at_expiry: str | None
    stale_outcome: str | None
    stale_at: datetime | None
    caller: str | None
    """The worker process that was fenced to call (``host:pid:nonce``)."""
    leg: Leg
    """``fulfil``, ``reverse`` for an attempt of its reversal, ``refulfil`` for one of its
    fulfilment again after a dispute won: as its record names it (start_attempt.lua), else by
    its token (after ``reversal_from`` or ``refulfil_from``)."""


RESOLVED_AS = {
    "retry": "run again",
    "fulfilled": "found applied: fulfilled",
    "not_applied": "found not applied: refunded_unfulfilled",
    "reversed": "its reversal found applied: reversed",
    "fulfilled_again": "its fulfilment again found applied",
    "granted_by_hand": "granted by hand",
    "taken_back_by_hand": "taken back by hand: reversed",
}
"""What a person's decision did (lua/operator.lua ``resolved_as``), in words."""


class Resolution(View):
    by: str
    at: datetime | None
    decision: str | None
    from_state: str | None
    meant: str | None
    """What it did, in words (RESOLVED_AS); null for a decision recorded before it was kept."""


def timeline(
    event_ids: list[str], fields: dict[str, dict[str, Any]], paid_by: str | None
) -> list[PaymentEvent]:
    """The payment's events in the order first recorded; ``fields`` holds each one's stored
    fields (all None once its record expired)."""
    rows = []
    for event_id in event_ids:
        f = {k: v.decode() for k, v in fields.get(event_id, {}).items() if v is not None}
        expired = "n" not in f
        rows.append(
            PaymentEvent(
                id=event_id,
                expired=expired,
                type=f.get("type"),
                role=f.get("role"),
                pays=f.get("paid") == "1",
                paid_the_payment=event_id == paid_by,
                deliveries=None if expired else count(f.get("n")),
                first_recorded_at=ms_time(f.get("first")),
                last_delivered_at=ms_time(f.get("last")),
            )
        )
    return rows


def attempts_of(f: dict[str, str]) -> list[Attempt]:
    """The attempts of a payment hash (decoded), by token. A fulfilled attempt's end is the
    payment's ``fulfilled_at`` (lua/finish_attempt.lua keeps it once, there), for an attempt
    of its reversal its ``reversed_at``, of its fulfilment again ``refulfilled_at``."""
    found = []
    began = {
        "reverse": whole(f.get("reversal_from")),
        "refulfil": whole(f.get("refulfil_from")),
        "settle": whole(f.get("settle_from")),
    }
    for name, value in f.items():
        label, _, token = name.partition(":")
        if label == "attempt" and token.isascii() and token.isdigit():
            record, n = _json_object(value), int(token)
            leg = _leg(record, n, began)
            found.append(_attempt(n, record, f.get(ENDED_AT[leg]), leg))
    return sorted(found, key=lambda a: a.token)


ENDED_AT: dict[Leg, str] = {
    "fulfil": "fulfilled_at",
    "reverse": "reversed_at",
    "refulfil": "refulfilled_at",
    "settle": "fulfilled_at",  # it found the effect: the payment fulfilled after all
}
"""Where the end of an attempt that applied is kept, by its leg (lua/finish_attempt.lua)."""


def _leg(record: dict[str, Any], token: int, began: dict[str, int | None]) -> Leg:
    """The leg its record names, else by its token: after the one the payment's latest leg
    began after (``reversal_from``, ``refulfil_from``) it is that leg's."""
    named = record.get("leg")
    if named in LEGS:
        return cast(Leg, named)
    after = [(start, leg) for leg, start in began.items() if start is not None and token > start]
    return cast(Leg, max(after)[1]) if after else "fulfil"


def _attempt(token: int, record: dict[str, Any], fulfilled_at: str | None, leg: Leg) -> Attempt:
    outcome = str(record.get("outcome", "unreadable"))
    ended = record.get("ended")
    if ended is None and outcome == "fulfilled":
        ended = fulfilled_at
    started, stopped = whole(record.get("started")), whole(ended)
    call_ms = record.get("ms")
    # A replay-safe action is fenced to call from the start (start_attempt.lua).
    calling = record.get("calling") or (started if call_ms is not None else None)
    return Attempt(
        token=token,
        outcome=outcome,
        started_at=ms_time(started),
        call_started_at=ms_time(calling),
        ended_at=ms_time(stopped),
        duration_ms=stopped - started if started is not None and stopped is not None else None,
        call_ms=float(call_ms) if isinstance(call_ms, int | float) else None,
        error=optional(record.get("detail")) if outcome != "fulfilled" else None,
        late=record.get("late") is True,
        phase_at_expiry=optional(record.get("phase")),
        stale_outcome=optional(record.get("stale_outcome")),
        stale_at=ms_time(record.get("stale_at")),
        caller=optional(record.get("caller")),
        leg=leg,
    )


def finished(attempts: list[Attempt]) -> int:
    """Attempts whose worker recorded how they ended."""
    return sum(1 for a in attempts if a.outcome in FINISHED_OUTCOMES)


def ended_by_the_ledger(attempts: list[Attempt]) -> int:
    """Attempts the ledger ended without their worker's word (taken back, the same purchase,
    a lease expired, stale before its call): neither finished nor still running."""
    return sum(1 for a in attempts if a.outcome in LEDGER_ENDED)


def receipt_of(stored: str | None) -> dict[str, Any] | None:
    """The downstream's receipt (a JSON object), or what was stored in its place."""
    if not stored:
        return None
    parsed = _json_object(stored)
    return parsed if parsed else {"unparsed": stored}


def resolution_of(f: dict[str, str]) -> Resolution | None:
    """A person's decision, from the fields lua/operator.lua stores in the payment hash:
    ``resolved_by`` (who), ``resolved_at`` (ms), ``resolved_decision`` and ``resolved_from``
    (the state it was decided from)."""
    by = optional(f.get("resolved_by"))
    if by is None:
        return None
    return Resolution(
        by=by,
        at=ms_time(f.get("resolved_at")),
        decision=optional(f.get("resolved_decision")),
        from_state=optional(f.get("resolved_from")),
        meant=RESOLVED_AS.get(f.get("resolved_as", "")),
    )


def _json_object(value: str) -> dict[str, Any]:
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
