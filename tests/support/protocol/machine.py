"""The explorer's state machine: ``Protocol`` composes the actors' rules and the invariants
(each in its own module of this package) with the setup of a program and the end of one,
where faults stop, time moves, and every paid payment must reach an end."""

import random
from collections import Counter

import hypothesis.strategies as st
from hypothesis.stateful import initialize, invariant

from ledger import keys
from ledger import settings as settings_module
from ledger.attempts import Attempts
from ledger.clock import StepWatch
from ledger.deliveries import Ledger
from ledger.gate import Gate
from ledger.read import payments
from ledger.scripts import Script
from ledger.setting_list import PAID
from tests.support.protocol.constants import (
    BREAKERS,
    CLOCK,
    KILL_MS,
    LEASE_MS,
    SETTLED,
    START_MS,
    TALLY,
    THIN_PAYING,
    TIMEOUT_MS,
    WORKERS,
)
from tests.support.protocol.deliveries import StripeDelivers
from tests.support.protocol.effect_invariants import EffectInvariants
from tests.support.protocol.events import event_pool
from tests.support.protocol.given_back import StripeGivesBack
from tests.support.protocol.ledger_invariants import LedgerInvariants
from tests.support.protocol.persons import Persons
from tests.support.protocol.reversal_invariants import ReversalInvariants
from tests.support.protocol.takings import StripeTakesBack
from tests.support.protocol.thin_events import ThinEvents
from tests.support.protocol.time_and_redis import TimeAndRedis
from tests.support.protocol.whole_jobs import WholeJobs
from tests.support.protocol.worker_calls import WorkerCalls
from tests.support.protocol.worker_jobs import WorkerJobs


class Protocol(
    ThinEvents,
    StripeTakesBack,
    StripeGivesBack,
    StripeDelivers,
    WholeJobs,
    WorkerJobs,
    WorkerCalls,
    TimeAndRedis,
    Persons,
    EffectInvariants,
    ReversalInvariants,
    LedgerInvariants,
):
    """The protocol explorer's machine (tests/support/protocol/__init__.py says what it does).

    Hypothesis collects the rules and invariants of every base class: one per actor (Stripe,
    the workers, the persons, time and Redis) and the invariants by topic."""

    @initialize(
        seed=st.integers(0, 2**32 - 1),
        replay_safe=st.booleans(),
        unlinked=st.booleans(),
        threshold=st.sampled_from((1, 2)),
        reverse=st.integers(0, 3).map(bool),  # on in most programs: its rules are the most
        reversal_replay_safe=st.booleans(),
        per_refund=st.booleans(),
        dispute_won=st.sampled_from(("hold", "fulfil")),
        settles=st.booleans(),
        one_customer=st.booleans(),
        reversal_apart=st.booleans(),
    )
    def setup(
        self,
        seed: int,
        replay_safe: bool,
        unlinked: bool = False,
        threshold: int = 2,
        reverse: bool = False,
        reversal_replay_safe: bool = False,
        per_refund: bool = False,
        dispute_won: str = "hold",
        settles: bool = False,
        one_customer: bool = False,
        reversal_apart: bool = False,
    ) -> None:
        self.redis.flushdb()
        self.now = START_MS  # Redis's clock, the scripts' (steps forward: redis_clock_steps)
        self.real = START_MS  # what really passed: every process's monotonic clock
        self.redis.set(CLOCK, self.now)
        self.watch = StepWatch(  # the looping sweeper's (workers/sweeper.py clock_watch)
            LEASE_MS / 1000, KILL_MS / 2000, lambda: self.now, lambda: self.real / 1000
        )
        self.watch.read()  # the sweeper runs from the start
        self.replay_safe = replay_safe
        # a built-in database action: replay-safe, and it settles a payment taken back after
        # an attempt that may have applied (its key found, or voided)
        self.settles = replay_safe and settles
        self.downstream = "db:a"  # FULFILMENT_ACTION's downstream (the_action_moves)
        self.reverse = reverse
        # the reversal's own settings only beside REVERSAL_ACTION (alone, start-up refuses them)
        self.reversal_replay_safe = reversal_replay_safe and reverse
        # REVERSAL_ACTION on another downstream than FULFILMENT_ACTION: its own breaker
        self.reversal_apart = reversal_apart and reverse
        self.per_refund = per_refund and reverse
        self.dispute_won = dispute_won if reverse else "hold"
        reversal = {"REVERSAL_ACTION": "shop.actions:take_back"} if reverse else {}
        self.settings = settings_module.load(
            {},
            REDIS_URL=self.server.url,
            STRIPE_MODE="test",
            LEASE_SECONDS=LEASE_MS // 1000,
            FULFILMENT_TIMEOUT=TIMEOUT_MS / 1000,
            FULFILMENT_REPLAY_SAFE=replay_safe,
            FULFIL_UNLINKED_INVOICES=unlinked,
            MAX_ATTEMPTS=3,
            RETRY_BASE_SECONDS=0.2,
            RETRY_MAX_SECONDS=1,
            QUEUED_GRACE_SECONDS=1,
            BREAKER_THRESHOLD=threshold,  # 1: every down answer opens it
            BREAKER_COOLDOWN_SECONDS=1,
            REVERSAL_REPLAY_SAFE=self.reversal_replay_safe,
            REVERSAL_PER_REFUND=self.per_refund,
            REVERSAL_DISPUTE_WON=self.dispute_won,
            PAID_EVENT_TYPES=(*PAID, THIN_PAYING),
            **reversal,
        )
        self.ledger = Ledger(self.redis, self.settings, clock_key=CLOCK)
        self.attempts = Attempts(self.redis, self.settings, clock_key=CLOCK)
        self.gate = Gate(self.redis, self.settings, clock_key=CLOCK)
        self.stripe_wait = Script(self.redis, "stripe_wait", clock_key=CLOCK)
        self.events, self.purchases = event_pool(random.Random(seed), one_customer)
        # the model's own account, empty (what each part holds: ProtocolState)
        self.seen = {}
        self.paid = set()
        self.amounts = {}
        self.known_late = set()
        self.workers = [None] * WORKERS
        self.calls = Counter()
        self.applied = Counter()
        self.unsafe_applied = Counter()
        self.applied_on = {}
        self.again = Counter()
        self.maybe_applied = set()
        self.tokens = {}
        self.last_state = {}
        self.person_acted = set()
        self.calls_at_success = {}
        self.proved = set()
        self.restarts = 0
        self.moves = 0
        self.steps = 0
        self.checks = 0
        self.witnesses = {b.action: set() for b in BREAKERS}
        self.retrying_since = {}
        self.refunds = {}
        self.counted_refunds = set()
        self.lost = set()
        self.refunded_first = set()
        self.won = set()
        self.dispute_closes = {}
        self.dispute_now = {}
        self.dispute_opened = {}
        self.charges = {}
        self.failures = {}
        self.granted_by_hand = set()
        self.taken_back_by_hand = set()
        self.reversal_calls = Counter()
        self.reversals_applied = Counter()
        self.reversal_maybe_applied = set()
        self.reversal_again = Counter()
        self.reversed_total = Counter()
        self.reversal_amounts = {}
        self.told_in_full = set()
        self.regranted = set()
        self.refulfil_calls = Counter()
        self.refulfils_applied = Counter()
        self.refulfil_unsafe_applied = Counter()
        self.refulfil_applied_on = {}
        self.refulfil_maybe_applied = set()
        self.refulfil_again = Counter()
        self.resolved_done = set()
        self.closed_as = {}
        self.person_reversed = set()
        self.voided = set()
        self.effect_on = {}
        self.may_have_called = set()
        self.unrefused = {}
        self.ended_after_a_call = set()
        self.settle_calls = Counter()
        self.failed_reversals_held = {}
        self.sending_twice = False
        TALLY["programs"] += 1

    # --- liveness ------------------------------------------------------------------------

    @invariant()
    def counted(self) -> None:
        self.checks += 1  # after each step, the setup's included

    def teardown(self) -> None:
        if not hasattr(self, "workers"):
            return
        TALLY["steps"] += self.checks - 1
        TALLY["restarts"] += self.restarts
        TALLY["clock_steps"] += self.steps
        self.workers = [None] * WORKERS  # faults stop: every stalled worker is gone
        self.gate.resume("person")  # and the downstream is up again
        for _ in range(12):
            self.time_passes(LEASE_MS + 1000)
            self.sweeper_runs()
            while self.redis.llen(f"rq:queue:{self.settings.QUEUE_NAME}"):
                self.worker_takes_a_job()
                self.worker_fences(0)
                self.worker_calls(0, "ok", True)
                self.worker_finishes(0)
                self.workers[0] = None
            if all(self.state(pk) in SETTLED for pk in self.paid):
                break
        stuck = {pk: self.state(pk) for pk in self.paid if self.state(pk) not in SETTLED}
        assert not stuck, f"paid payments that never ended: {stuck}"
        attention = {
            p.payment_key for p in payments.payments(self.redis, payments.ATTENTION, limit=500)
        }
        waiting = {pk for pk in self.paid if self.state(pk) in ("interrupted", "held", "failed")}
        assert waiting <= attention, waiting - attention
        if self.reverse:  # a taken-back effect is reversed, or waits for a person
            forgotten = {
                pk for pk in self.paid if self.state(pk) == "fulfilled" and self.left_taken_back(pk)
            }
            assert not forgotten, f"fulfilled and taken back, never reversed: {forgotten}"
        self.one_effect_per_payment()
        self.a_success_is_never_followed_by_another_call()
        self.tally_the_gate()

    def tally_the_gate(self) -> None:
        stats = self.redis.hgetall(keys.STATS)
        for b in BREAKERS:
            breaker = self.redis.hgetall(b.state)
            apart = "" if b == keys.FULFILMENT_BREAKER else f"{b.action}_"
            TALLY[f"{apart}breaker_opens"] += int(breaker.get(b"opens", 0))
            TALLY[f"{apart}probes"] += int(breaker.get(b"probes", 0))
        for reason in (*keys.WAIT_REASONS, keys.STRIPE_WAIT, keys.CHECKOUT_WAIT):
            TALLY[f"deferred_{reason}"] += int(stats.get(f"deferred:{reason}".encode(), 0))
        TALLY["refunded"] += int(stats.get(b"attempts_refunded", 0))
        for counter in (
            "reversals",
            "reversals_due",
            "refunded_unfulfilled",
            "refund_reversals",
            "reinstated",
            "refulfils_due",
            "refulfilled",
        ):
            TALLY[counter] += int(stats.get(counter.encode(), 0))
        TALLY["reversal_calls"] += sum(self.reversal_calls.values())
        TALLY["settle_calls"] += sum(self.settle_calls.values())
        TALLY["voided"] += len(self.voided)
        TALLY["granted_by_hand"] += len(self.granted_by_hand)
        TALLY["taken_back_by_hand"] += len(self.taken_back_by_hand)
        for counter in ("settles_due", "settled_voided", "settled_applied", "resolved_not_applied"):
            TALLY[counter] += int(stats.get(counter.encode(), 0))
        for pk in self.all_payments():  # how the payments a settlement began for ended
            if self.redis.hexists(keys.payment(pk), "settle_from"):
                TALLY[f"settle_ended_{self.state(pk)}"] += 1
        TALLY["refulfil_calls"] += sum(self.refulfil_calls.values())
