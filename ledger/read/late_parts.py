"""Which parts of a fulfilled payment's purchase came after the call that fulfilled it.

A payment's page shows its purchase as the payment hash holds it now (ledger/purchase.py);
the call that fulfilled it got what the hash held when its worker read it, before that
attempt started (workers/jobs.py). An event first recorded after that start was not in the
call, so a part (the Checkout Session, the invoice, the PaymentIntent with its charge) all
of whose events came after it was missing from the call, however whole the page looks: with
CHECKOUT_WAIT_SECONDS at 0, Stripe's usual order (``charge.succeeded``,
``payment_intent.succeeded``, then ``checkout.session.completed``) fulfils a Checkout payment
before its session's event. Told from the times the ledger records anyway (each event's
``first``, each attempt's ``started``), so the payment hash keeps nothing more. Only what is
certain is said: a part an event brought before the call, or whose events' records expired,
is not named (an event recorded between the worker's read and its attempt's start was in
neither, and is not named either)."""

from datetime import datetime
from typing import Literal

from ledger import keys
from ledger.purchase_fields import NO_SESSION, NOT_ASKED
from ledger.purchase_invoice import ALL_LINES
from ledger.read.base import View
from ledger.read.timeline import Attempt, PaymentEvent

Part = Literal["checkout_session", "invoice", "payment_intent"]

PART_OF_TYPE: tuple[tuple[str, Part | None], ...] = (
    ("checkout.session.", "checkout_session"),
    ("invoice.", "invoice"),
    ("payment_intent.", "payment_intent"),
    ("charge.dispute.", None),  # a dispute's object, not the charge's
    ("charge.refund.", None),  # a refund's
    ("charge.", "payment_intent"),  # the charge carries the PaymentIntent's metadata and email
)
"""The part of the purchase an event's type brings (ledger/purchase_fields.py reads the
objects these types carry), by the first prefix that matches; None: no part."""

SESSION_WAITS = f"{keys.CHECKOUT_WAIT}_waits"
"""How often a payment waited for its session's event (lua/stripe_wait.lua): once it did and
found no ``NO_SESSION``, the wait ended with the session, by its event or through the API."""


class LatePart(View):
    part: Part
    event_id: str
    """The first event that brought the part."""
    event_type: str
    first_recorded_at: datetime
    fulfilled_by: int
    """The token of the attempt whose call fulfilled the payment, started before it."""
    call_started_at: datetime
    """When that attempt started."""
    note: str
    """What the call lacked, in words."""


def part_of(event_type: str) -> Part | None:
    return next((part for prefix, part in PART_OF_TYPE if event_type.startswith(prefix)), None)


def fulfilling_attempt(attempts: list[Attempt]) -> Attempt | None:
    """The attempt of its fulfilment whose call applied it (none for a payment fulfilled by a
    person's word or a settlement that found the effect)."""
    return next((a for a in attempts if a.leg == "fulfil" and a.outcome == "fulfilled"), None)


def came_after_fulfilment(
    events: list[PaymentEvent], attempts: list[Attempt], f: dict[str, str]
) -> list[LatePart]:
    """The parts of the purchase whose every event was first recorded after the attempt that
    fulfilled the payment started; ``f``: the payment hash (decoded)."""
    call = fulfilling_attempt(attempts)
    if call is None or call.started_at is None or any(e.expired for e in events):
        return []
    started = call.started_at
    by_part: dict[Part, list[PaymentEvent]] = {}
    for e in events:
        part = part_of(e.type or "")
        if part is not None:
            by_part.setdefault(part, []).append(e)
    found = []
    for part, mine in by_part.items():
        if not all(e.first_recorded_at and e.first_recorded_at > started for e in mine):
            continue
        if part == "checkout_session" and SESSION_WAITS in f and NO_SESSION not in f:
            continue  # the wait ended with the session (through the API): the call had it
        first = min(mine, key=lambda e: e.first_recorded_at or started)
        found.append(
            LatePart(
                part=part,
                event_id=first.id,
                event_type=first.type or "",
                first_recorded_at=first.first_recorded_at or started,
                fulfilled_by=call.token,
                call_started_at=started,
                note=_note(part, f),
            )
        )
    return found


def _note(part: Part, f: dict[str, str]) -> str:
    if part == "checkout_session":
        items = " or line items" if f.get("p_items") else ""
        return (
            "the Checkout Session's event came after its fulfilment: the call had no session"
            f" (no client_reference_id, no session metadata or customer details{items};"
            f" {_why_no_wait(f)})"
        )
    if part == "invoice":
        lines = (
            "its billing reason or metadata (its lines it had: INVOICE_LINES read them)"
            if ALL_LINES in f
            else "its lines (lines_complete false), billing reason or metadata"
        )
        return (
            "the invoice's event came after its fulfilment: the call had at most the invoice's"
            f" id (from its PaymentIntent), not {lines}"
        )
    return (
        "the PaymentIntent's and its charge's events came after its fulfilment: the call had"
        " no charge, nor the PaymentIntent's metadata, receipt email or shipping"
    )


def _why_no_wait(f: dict[str, str]) -> str:
    """Why the call did not wait for the session: certain from the hash, or both reasons."""
    if f.get(NO_SESSION) == NOT_ASKED:
        return "CHECKOUT_WAIT_SECONDS ran out first; no STRIPE_API_KEY to ask Stripe's API for it"
    if NO_SESSION in f:
        return "CHECKOUT_WAIT_SECONDS ran out first and Stripe's API had no session for it then"
    if f.get("p_in"):
        return "not waited for: CHECKOUT_WAIT_SECONDS=0, or it named an invoice, which never waits"
    return "not waited for: CHECKOUT_WAIT_SECONDS=0"
