"""The explorer's settings, budgets and the names its rules and invariants share."""

import os
from collections import Counter

from ledger import keys
from ledger import settings as settings_module
from ledger.gate import Admission, Health

PROGRAMS = int(os.environ.get("PROTOCOL_PROGRAMS", "300"))
TALLY: Counter[str] = Counter()
"""What a run did, over all its programs (PROTOCOL_REPORT)."""
STEPS = int(os.environ.get("PROTOCOL_STEPS", "50"))
CLOCK = "wl:test:clock"
LEASE_MS, TIMEOUT_MS = 3000, 1000
KILL_MS = int(settings_module.Settings.FULFILMENT_KILL_MARGIN_SECONDS * 1000)
WINDOW_MS = LEASE_MS - TIMEOUT_MS - 2 * KILL_MS  # a call starts this soon after its fence or not
START_MS = 1_800_000_000_000
WORKERS = 2
OUTCOMES = ("ok", "transient", "ambiguous", "permanent", "down", "refused", "quota")
"""down: a 503 (sent, refused); refused: the connection was refused (never sent); quota: a
429 with Retry-After (a refusal that may concern this payment alone)."""
REFUSALS = ("transient", "permanent", "down", "refused", "quota")
"""The outcomes whose answer refused the call (workers/jobs.py refused_by): nothing applied."""
HEALTH = {
    "ok": Health("up"),
    "transient": Health("up"),
    "permanent": Health("up"),
    "ambiguous": Health("none"),
    "down": Health("down"),
    "refused": Health("down", sent=False),
    "quota": Health("down", retry_after_s=2.0),
}
LOOP = {"queued", "in_progress", "retrying"}
"""The states a payment goes round while it is retried: its retrying age spans them."""
TAKING = ("refund.", "charge.refunded", "charge.dispute.closed")
"""The event types that take a payment back (its refund events, a dispute closed)."""
PAYING = "payment_intent.succeeded"
THIN_PAYING = "v1.payment_intent.succeeded"
"""A thin paid event: no amount, which the payment's first snapshot paid event gives."""
TIE = "invoice_payment.paid"
"""A basil renewal's tie of its invoice to its PaymentIntent (never paid itself)."""
PARTS = 10
"""The pool's last events: two Checkout purchases with an invoice (3 each) and a basil
renewal (4: event_pool)."""
PERSON_STATES = ("interrupted", "failed", "held")
"""The states a person's decision is for (person_decides)."""
SETTLED = {"fulfilled", "failed", "interrupted", "held", "reversed", "refunded_unfulfilled"}


GO = Admission("go")
BREAKERS = keys.BREAKERS

MAY_HAVE_APPLIED = "after an attempt of a replay-safe action that may have applied it"
"""What a hold reason says of a payment taken back, or given back, after such an attempt
(ledger/lua/take_back_steps.lua)."""
