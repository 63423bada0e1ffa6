"""The explorer's state, declared: what a program holds (the ledger's parts, the model's own
account of what Stripe, the workers and the persons did), and reads of the ledger in Redis
that the rules and the invariants share."""

import json
from collections import Counter
from typing import Any

from hypothesis.stateful import RuleBasedStateMachine
from redis import Redis
from redis.exceptions import BusyLoadingError
from rq.job import Job

from ledger import keys
from ledger import settings as settings_module
from ledger.attempts import Attempts
from ledger.clock import StepWatch
from ledger.deliveries import Delivery, Ledger, new_request_id
from ledger.event_shape import data_object
from ledger.events import classify
from ledger.gate import Gate
from ledger.scripts import Script
from ledgerctl import samples
from tests.support.processes import RedisServer
from tests.support.protocol.constants import CLOCK, PAYING
from tests.support.protocol.worker import Worker


class ProtocolState(RuleBasedStateMachine):
    """The state of one program, declared with its types; ``Protocol.setup`` sets it.

    The model keeps its own account (deliveries, calls, effects, what was taken back) beside
    the ledger's, so the invariants compare the two. Every attribute but ``server`` and
    ``redis`` (set on the class by the test) is set by the setup, none at class level: an
    invariant that runs before the setup finds none (``hasattr``)."""

    # Set by the test before a program (test_protocol.py): the real Redis and a client that
    # waits out its loading after a restart.
    server: RedisServer
    redis: Redis

    # The program's settings and the ledger's parts, over Redis (Protocol.setup).
    now: int  # Redis's clock, the scripts' (steps forward: redis_clock_steps)
    real: int  # what really passed: every process's monotonic clock
    watch: StepWatch  # the looping sweeper's (workers/sweeper.py clock_watch)
    replay_safe: bool
    settles: bool  # a built-in database action that settles (Protocol.setup)
    downstream: str  # FULFILMENT_ACTION's downstream (the_action_moves)
    reverse: bool
    reversal_replay_safe: bool
    reversal_apart: bool  # REVERSAL_ACTION on another downstream: its own breaker
    per_refund: bool
    dispute_won: str
    settings: settings_module.Settings
    ledger: Ledger
    attempts: Attempts
    gate: Gate
    stripe_wait: Script
    events: list[tuple[dict[str, Any], bytes]]  # the pool: each event and its body
    purchases: list[frozenset[str]]  # the payment keys of each purchase in the pool

    # What was delivered and paid, by the model's own account.
    seen: dict[str, bytes]  # event id -> first body delivered
    paid: set[str]  # payments a paid event was recorded for
    amounts: dict[str, int]  # pk -> the amount its first paid event with one said
    known_late: set[str]  # amounts known after a reversal was due without

    # Workers and their calls.
    workers: list[Worker | None]
    calls: Counter[str]  # every downstream call
    applied: Counter[str]  # effects of every call
    # effects of calls by an action that is not replay-safe: a downstream that never
    # dedupes (the action may move to one: the_action_moves)
    unsafe_applied: Counter[str]
    # where each payment's fulfilment applied: a replay-safe action dedupes by its key on
    # one downstream, never across two (the_action_moves)
    applied_on: dict[str, set[str]]
    # calls of an action that is not replay-safe made after one that may have applied
    again: Counter[str]
    maybe_applied: set[str]  # an ok or ambiguous answer: it may have applied
    tokens: dict[str, int]
    last_state: dict[str, str]
    person_acted: set[str]
    calls_at_success: dict[str, int]  # a current attempt's success: calls then
    proved: set[str]  # lifted by its own attempt's late receipt this step
    restarts: int
    moves: int
    steps: int
    checks: int
    # down reports since an up one, by the breaker they went to (its downstream's): (who
    # was refused: its customer or itself, token)
    witnesses: dict[str, set[tuple[str, int]]]
    retrying_since: dict[str, float]  # pk -> its retrying score, while in LOOP

    # Reversals (docs/REVERSAL.md): what Stripe took back, by the events delivered.
    refunds: dict[str, dict[str, int]]  # pk -> refund id -> amount (-1 failed)
    counted_refunds: set[tuple[str, str]]  # (pk, refund id) once counted
    lost: set[str]  # a dispute closed as lost
    refunded_first: set[str]  # taken back before any call was made or fenced
    won: set[str]  # a dispute closed as won
    # pk -> dispute id -> (status, created) of its latest close (ties: the later recorded)
    dispute_closes: dict[str, dict[str, tuple[str, int]]]
    # the status of the close that decides: a lost one, else the latest
    dispute_now: dict[str, str]
    # its latest other dispute event, by created (ties: the later): (created, id, type)
    dispute_opened: dict[str, tuple[int, str, str]]
    charges: dict[str, tuple[int, int]]  # the latest charge event's (at, figure)
    # pk -> failed refund id -> (amount, made at, first said failed at)
    failures: dict[str, dict[str, tuple[int, int, int]]]
    granted_by_hand: set[str]  # given back, then granted by a person
    taken_back_by_hand: set[str]  # granted again, taken back again: a person's
    reversal_calls: Counter[str]  # by payment
    # by reversal, (payment, refund id or "" for the whole payment or what remains of it)
    reversals_applied: Counter[tuple[str, str]]  # never deduped
    reversal_maybe_applied: set[tuple[str, str]]
    reversal_again: Counter[tuple[str, str]]
    reversed_total: Counter[str]  # the amounts of the reversals applied
    reversal_amounts: dict[tuple[str, str], int]  # of each, once applied
    # the reversal action heard it taken back in full: a reversal of the whole payment or
    # what remains applied, or one of a refund carrying the amount paid and reaching it
    told_in_full: set[str]
    regranted: set[tuple[str, str]]  # a failed refund's, granted back by hand
    # a fulfilment again after a dispute won (REVERSAL_DISPUTE_WON=fulfil)
    refulfil_calls: Counter[str]
    refulfils_applied: Counter[str]
    refulfil_unsafe_applied: Counter[str]  # as unsafe_applied
    refulfil_applied_on: dict[str, set[str]]  # as applied_on: its own key
    refulfil_maybe_applied: set[str]
    refulfil_again: Counter[str]  # as again
    resolved_done: set[str]  # a person said its effect exists
    # closed by a person as fulfilled, no call of its own, while held as the same purchase
    # as another record (a possible duplicate, a tie sent late): pk -> that record, whose
    # key its purchase's effect is under
    closed_as: dict[str, str]
    person_reversed: set[str]  # a person said a reversal of it applied
    voided: set[str]  # payments whose key a settlement voided
    effect_on: dict[str, str]  # pk -> where the attempt the ledger kept applied
    # an attempt of a replay-safe fulfilment started: fenced from its start, it may have
    # called whatever the model's worker did after (died, stalled)
    may_have_called: set[str]
    # pk -> the tokens of its replay-safe attempts (any leg but a reversal) that may have
    # applied: started, and not ended by their own live word that their call was refused,
    # never sent or never made
    unrefused: dict[str, set[int]]
    ended_after_a_call: set[str]  # refunded_unfulfilled after such a start
    settle_calls: Counter[str]
    # REVERSAL_PER_REFUND: pk -> reversed refunds that failed since, seen held for a person
    failed_reversals_held: dict[str, set[str]]
    sending_twice: bool  # the next admission or report is sent again

    # set on first use (self.__dict__.setdefault), as are ``poison``, ``never_sent`` and
    # ``quota_party`` (downstream_refuses_one_payment_alone, one_payment_is_never_sent,
    # downstream_refuses_one_customer)
    rv_seen: dict[str, dict[str, int]]  # pk -> its ``rv`` when last checked

    def stripe_delivery(self, event: dict[str, Any], body: bytes | None = None) -> Delivery:
        """Stripe's delivery of ``event``, classified by the program's settings: ``body`` is
        its bytes as sent (the pool's), else it is encoded as the samples are."""
        body = samples.encode(event) if body is None else body
        c = classify(event, self.settings.policy)
        return Delivery(event, body, c, "primary", "stripe", new_request_id())

    def pool_events(self, event_type: str, pk: str, **fields: object) -> list[int]:
        """Indexes of the pool's events of ``event_type`` for payment ``pk`` (a PaymentIntent's
        own events by its id, the others by their ``payment_intent``) whose object has
        ``fields``."""
        return [
            i
            for i, (e, _) in enumerate(self.events)
            if e["type"] == event_type
            and (o := data_object(e)).get("id" if event_type == PAYING else "payment_intent") == pk
            and all(o.get(k) == v for k, v in fields.items())
        ]

    def pool_event(self, event_type: str, pk: str, **fields: object) -> int:
        return self.pool_events(event_type, pk, **fields)[0]

    def state(self, pk: str) -> str:
        return (self.redis.hget(keys.payment(pk), "state") or b"").decode()

    def current_token(self, pk: str) -> int:
        return int(self.redis.hget(keys.payment(pk), "token") or 0)

    def payment_core(self, pk: str) -> tuple[Any, ...]:
        """What a stale worker must never change."""
        fields = ("state", "token", "lease_until", "phase", "receipt", "fulfilled_at", "next_at")
        return tuple(self.redis.hmget(keys.payment(pk), fields))

    def leg(self, pk: str) -> str:
        leg = (self.redis.hget(keys.payment(pk), "leg") or b"").decode()
        return leg if leg in ("reverse", "refulfil", "settle") else "fulfil"

    def reversal_refund(self, pk: str) -> str:
        return (self.redis.hget(keys.payment(pk), "reversal_refund") or b"").decode()

    def all_payments(self) -> set[str]:
        prefix = keys.payment("")
        return {
            k.decode()[len(prefix) :] for k in self.redis.scan_iter(match=prefix + "*", count=1000)
        }

    def loaded(self) -> bool:
        try:
            return self.redis.get(CLOCK) is not None  # PING answers even while loading
        except BusyLoadingError:
            return False

    def party(self, pk: str) -> str:
        """Who a refusal of payment ``pk`` is about: its customer, else the payment itself."""
        customer = (self.redis.hget(keys.payment(pk), "p_customer") or b"").decode()
        return f"cus:{customer}" if customer else pk

    def held_for(self, pk: str) -> set[str]:
        """The failed refunds whose reversals a hold told a person to grant back
        (``rv_failed``)."""
        return set(json.loads(self.redis.hget(keys.payment(pk), "rv_failed") or b"{}"))

    def held_after_refund(self, pk: str) -> bool:
        reason = (self.redis.hget(keys.payment(pk), "hold_reason") or b"").decode()
        return self.state(pk) == "held" and "may have applied" in reason

    def held_as_the_same_purchase_as(self, pk: str) -> str | None:
        """The record whose key a held payment with no call of its own would have its
        purchase's effect under, were a person to close it as fulfilled: the record its hold's
        reason names as the same purchase (a tie Stripe sent late), else as the one it may
        duplicate, each followed through the records a person closed so (``closed_as``),
        never back to ``pk``; a twin itself held or failed with no call that may have
        applied is passed over for the duplicate's. None when it is not so held."""
        reason = (self.redis.hget(keys.payment(pk), "hold_reason") or b"").decode()
        own = self.calls[pk] or self.applied[pk] or pk in self.may_have_called
        if self.state(pk) != "held" or own:
            return None
        named = [
            reason.split(said, 1)[1].split(" ", 1)[0].rstrip(":;,") if said in reason else None
            for said in ("same purchase as ", "possible duplicate purchase of ")
        ]
        twin, dup = (self.effect_holder(pk, other) for other in named)
        if twin and dup and twin == named[0] and self.state(twin) in ("held", "failed"):
            if not self.unrefused.get(twin):
                return dup
        return twin or dup or named[0] or named[1]

    def effect_holder(self, pk: str, other: str | None) -> str | None:
        """``other``, or the record a person closed it as (and so on), never ``pk``."""
        for _ in range(4):
            if other is None or other == pk:
                return None
            if other not in self.closed_as:
                return other
            other = self.closed_as[other]
        return None

    def possible_duplicate_of_its_purchase(self, pk: str) -> bool:
        """Held as a possible duplicate (no tie yet) of another record of its own purchase:
        the person who checks finds it is the same purchase and closes it."""
        reason = (self.redis.hget(keys.payment(pk), "hold_reason") or b"").decode()
        return reason.startswith("possible duplicate") and any(
            pk in ids and len(ids) > 1 for ids in self.purchases
        )

    def failed_reversals(self, pk: str) -> set[str]:
        """The refunds the ledger reversed on their own (``rv``) that failed since, by the
        model's account."""
        reversed_each = json.loads(self.redis.hget(keys.payment(pk), "rv") or b"{}")
        return {r for r in reversed_each if self.refunds.get(pk, {}).get(r) == -1}

    def take_the_job_of(self, pk: str) -> str | None:
        """A worker takes the queued job of payment ``pk`` (another job may come first)."""
        queue = keys.rq_queue(self.settings.QUEUE_NAME)
        for raw in self.redis.lrange(queue, 0, -1):
            if Job.fetch(raw.decode(), connection=self.redis).args[0] == pk:
                self.redis.lrem(queue, 1, raw)
                return raw.decode()
        return None
