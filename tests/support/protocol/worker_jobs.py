"""Rules of the workers, step by step: take a job through the gate (as workers/jobs.py and
workers/gating.py do), fence, finish with an outcome, die, stall and come back late; the
action moving to another downstream."""

from collections.abc import Callable
from functools import partial
from typing import Any

import hypothesis.strategies as st
from hypothesis.stateful import precondition, rule
from rq.job import Job

from ledger import keys
from ledger.breakers import breaker_of
from ledger.gate import Admission, Health
from ledger.purchase import purchase_of, stored_fields
from ledger.reversals import refulfil_of
from ledger.stored import whole
from tests.support.protocol.constants import BREAKERS, HEALTH, LEASE_MS, TALLY, WORKERS
from tests.support.protocol.time_and_redis import TimeAndRedis
from tests.support.protocol.worker import Worker
from tests.support.protocol.worker_calls import WorkerCalls
from workers.gating import report
from workers.reversal_target import applied_on, refusal


class WorkerJobs(WorkerCalls, TimeAndRedis):
    """A worker's job, one step at a time (its call: WorkerCalls)."""

    @precondition(lambda self: None in self.workers)
    @rule()
    def worker_takes_a_job(self) -> None:
        job_id = self.redis.lpop(keys.rq_queue(self.settings.QUEUE_NAME))
        if job_id is None:
            return
        pk = Job.fetch(job_id.decode(), connection=self.redis).args[0]
        # workers/jobs.py: the leg due, read before the gate, picks the action
        leg = self.leg(pk)
        safe = self.reversal_replay_safe if leg == "reverse" else self.replay_safe
        settles = self.settles if leg != "reverse" else False
        called_on = (self.redis.hget(keys.payment(pk), "called_on") or b"").decode()
        if leg == "settle" and called_on and called_on != self.downstream:
            # jobs.py: its calls went to another downstream than this worker's: given up
            start = self.attempts.start_without_call(pk, job_id.decode(), leg)
            if start.verdict == "go":
                self.attempts.finish(pk, start.token, "failed", "model: moved", 0.0)
                assert self.state(pk) == "held", f"{pk}: settled on another downstream"
            return
        moved = leg == "reverse" and refusal(
            applied_on(self.redis, pk), self.downstream, "reversal"
        )
        if moved:  # jobs.py: its effect went to another downstream than this worker's: held
            start = self.attempts.start_without_call(pk, job_id.decode(), leg)
            if start.verdict == "go":
                TALLY["reversals_held_moved"] += 1
                self.attempts.finish(pk, start.token, "held", moved, 0.0)
                assert self.state(pk) == "held", f"{pk}: a moved reversal not held"
            return
        breaker = breaker_of(leg, self.reversal_apart)  # jobs.py: its downstream's
        admit = partial(self.gate.admit, pk, job_id.decode(), park_rate=True, breaker=breaker)
        admission = admit()  # workers/gating.py
        if self.sending_twice and admission.verdict == "go":
            self.sent_again_changes_nothing(pk, admit, admission, "admission")
        paused = self.redis.exists(keys.PAUSE)
        assert not (paused and admission.verdict == "go"), "a call admitted while paused"
        self.held_only_by_its_own_breaker(pk, leg, breaker, admission)
        if admission.verdict != "go":
            return  # deferred in the ledger (no attempt), or nothing to do
        ds = self.downstream if leg != "reverse" else "reversal"
        start = self.attempts.start(
            pk, job_id.decode(), safe, leg=leg, settles=settles, downstream=ds
        )
        if start.verdict == "go":
            # A replay-safe attempt may call from its start: no separate fence.
            fenced = self.real if safe else None
            if safe and leg == "fulfil":
                self.may_have_called.add(pk)
            if safe and leg != "reverse":
                self.unrefused.setdefault(pk, set()).add(start.token)
            worker = Worker(pk, start.token, leg, safe, fenced, admission=admission)
            worker.downstream, worker.breaker = ds, breaker
            worker.deployed = self.downstream
            worker.paid = whole(start.amount)  # jobs.py's purchase: the amount at its start
            if leg == "reverse":  # jobs.py reads the reversal under the lease
                due = self.redis.hmget(keys.payment(pk), "reversal_refund", "reversal_amount")
                worker.refund, worker.amount = (due[0] or b"").decode(), whole(due[1])
            if leg == "refulfil":  # what jobs.py passes: the amount it grants again
                stored = stored_fields(self.redis, pk)
                worker.amount = refulfil_of(purchase_of(pk, start.token, stored), stored).amount
            self.workers[self.workers.index(None)] = worker
        else:
            report(self.gate, admission, pk, start.token, Health("none"), "", breaker)

    def held_only_by_its_own_breaker(
        self, pk: str, leg: str, breaker: keys.Breaker, admission: Admission
    ) -> None:
        """A call waits behind a breaker only when that of its own downstream is open; the
        other's open breaker holds none of it."""
        if admission.reason in {b.wait for b in BREAKERS}:
            assert admission.reason == breaker.wait, f"{pk}: a {leg} call held by another breaker"
            assert self.redis.hget(breaker.state, "state") == b"open", f"{pk}: held by a closed one"
        others = [b for b in BREAKERS if b != breaker and self.reversal_apart]
        if admission.verdict == "go" and any(
            self.redis.hget(b.state, "state") == b"open" for b in others
        ):
            TALLY[f"{breaker.action}_called_while_the_other_breaker_is_open"] += 1

    @rule()
    def worker_cannot_load_its_action(self) -> None:
        """A worker deployed with an action it cannot build (workers/jobs.py
        failed_without_call, before the gate): it takes the next job and fails its payment,
        whatever leg is due, without a call. Its attempt says nothing of the action."""
        job_id = self.redis.lpop(keys.rq_queue(self.settings.QUEUE_NAME))
        if job_id is None:
            return
        pk = Job.fetch(job_id.decode(), connection=self.redis).args[0]
        start = self.attempts.start_without_call(pk, job_id.decode(), self.leg(pk))
        if start.verdict == "go":
            TALLY["failed_without_call"] += 1
            self.attempts.finish(pk, start.token, "failed", "model: cannot load the action", 0)

    @rule(reason=st.sampled_from((keys.STRIPE_WAIT, keys.CHECKOUT_WAIT)))
    def purchase_waits_for_stripe(self, reason: str) -> None:
        """A worker, before the gate, finds Stripe's API down while reading a Checkout
        purchase's line items, or the payment's session not come yet: the payment waits
        without an attempt (ledger/purchase_reads.py, lua/stripe_wait.lua)."""
        job_id = self.redis.lpop(keys.rq_queue(self.settings.QUEUE_NAME))
        if job_id is None:
            return
        pk = Job.fetch(job_id.decode(), connection=self.redis).args[0]
        token = self.current_token(pk)
        args = {"reason": reason, "base_ms": 200, "cap_ms": 1000}
        args |= {"retry_after_ms": 0, "detail": "model"}
        self.stripe_wait({"payment": keys.payment(pk)}, args)
        assert self.current_token(pk) == token, "waiting for Stripe spent an attempt"

    @precondition(lambda self: self.moves < 1)
    @rule(replay_safe=st.booleans())
    def the_action_moves(self, replay_safe: bool | None = None) -> None:
        """FULFILMENT_ACTION moves to another downstream (a shop from its SQLite file to
        PostgreSQL, or to its own HTTP API that is not replay-safe): a payment whose calls
        went to both is never settled on either, a settlement on the other one than its
        calls' is given up (held), and so is a reversal of an effect on the other one (held,
        never called); a fulfilment (again) after a call on the first that may have applied
        is held, never called on the second, whatever its replay-safety."""
        self.moves += 1
        self.downstream = "db:b"
        self.replay_safe = self.replay_safe if replay_safe is None else replay_safe
        self.settles = self.settles and self.replay_safe

    @rule(slot=st.integers(0, WORKERS - 1))
    def worker_fences(self, slot: int) -> None:
        w = self.workers[slot]
        if w is None or w.fenced_at is not None:
            return
        stale = self.current_token(w.payment) != w.token
        before = self.payment_core(w.payment)
        if self.attempts.mark_calling(w.payment, w.token):
            w.fenced_at = self.real
        else:
            report(self.gate, w.admission, w.payment, w.token, Health("none"), "", w.breaker)
            self.workers[slot] = None
        if stale:
            assert self.payment_core(w.payment) == before, "a stale token changed state"

    @rule(slot=st.integers(0, WORKERS - 1))
    def worker_finishes(self, slot: int) -> None:
        w = self.workers[slot]
        if w is None or not w.outcome:
            return
        ambiguous = "retry" if w.replay_safe else "interrupted"
        done = "voided" if w.leg == "settle" and not w.found else "fulfilled"
        mapped = {"ok": done, "ambiguous": ambiguous, "permanent": "failed"}
        TALLY[f"finished_{w.outcome}"] += 1
        health, detail = HEALTH[w.outcome], f"model {w.outcome}"
        told = (self.gate, w.admission, w.payment, w.token, health, detail, w.breaker)
        report(*told)  # workers/gating.py
        if self.sending_twice:
            again = partial(report, *told)
            self.sent_again_changes_nothing(w.payment, again, None, "report")
        self.witness(w, health)
        self.finish(slot, mapped.get(w.outcome, "retry"))

    def sent_again_changes_nothing(
        self, pk: str, send: Callable[[], Any], first: Any, what: str
    ) -> None:
        """``send`` again answers ``first`` and leaves the payment, the breaker, its
        witnesses and the counters as they were."""

        def seen() -> tuple[Any, ...]:
            hashes = (keys.payment(pk), *(b.state for b in BREAKERS), keys.STATS)
            witnesses = [self.redis.zrange(b.witnesses, 0, -1, withscores=True) for b in BREAKERS]
            return (*map(self.redis.hgetall, hashes), *witnesses)

        before = seen()
        assert send() == first, f"{pk}: the {what} sent again answered otherwise"
        assert seen() == before, f"{pk}: the {what} sent again changed the ledger"
        TALLY[f"{what}_sent_twice"] += 1

    @rule(slot=st.integers(0, WORKERS - 1))
    def worker_dies(self, slot: int) -> None:
        self.workers[slot] = None  # its state simply vanishes

    @rule()
    def worker_dies_with_a_job_it_took(self) -> None:
        """fulfilment-worker takes jobs in batches (workers/dispatch.py): one it took and had
        not started when its process died is off the queue, still ``queued``, for the sweeper."""
        self.redis.lpop(keys.rq_queue(self.settings.QUEUE_NAME))

    @rule(slot=st.integers(0, WORKERS - 1), deferred=st.booleans())
    def late_success_after_a_person_retried(self, slot: int, deferred: bool) -> None:
        """A worker (this one, or one that takes the next job) calls, it applies, and stalls
        before it finishes, past its lease: the sweeper finds the payment interrupted
        (replay-safe: retrying, the same token). A person who does not see the effect yet (a
        downstream that shows it later) resolves it --retry, the gate defers the re-queued job
        (a pause, resumed after); then the stalled worker's success arrives. It proves the
        effect: kept, and the payment is never called again."""
        if self.workers[slot] is None and None in self.workers:
            slot = self.workers.index(None)
            self.worker_takes_a_job()
        taken = self.workers[slot]
        if taken is not None and taken.fenced_at is None:
            self.worker_fences(slot)
        w = self.workers[slot]
        if w is None or w.fenced_at is None:
            return
        if not w.outcome:
            self.worker_calls(slot, "ok", True)
        if self.workers[slot] is None or w.outcome != "ok":
            return  # past its call window it did not call; or it had called otherwise
        self.time_passes(LEASE_MS + 1)
        self.sweeper_runs()
        pk = w.payment
        if self.current_token(pk) != w.token:
            return
        if self.state(pk) == "interrupted":
            verdict, _ = self.attempts.record_decision(pk, "retry", ("interrupted",), "person")
            if verdict != "ok":
                return  # its process may still be in the call: the person waits
            self.person_acted.add(pk)
        paused = deferred and self.state(pk) == "queued" and not self.redis.exists(keys.PAUSE)
        if paused:
            self.gate.pause("person", "model")
            job_id = self.take_the_job_of(pk)
            breaker = breaker_of(self.leg(pk), self.reversal_apart)
            admission = self.gate.admit(pk, job_id, park_rate=True, breaker=breaker)
            assert job_id and admission.verdict == "wait"
            TALLY["late_success_deferred"] += 1
        before = self.state(pk)
        self.worker_finishes(slot)
        again = self.leg(pk) != "fulfil"  # taken back since (or fulfilled again after)
        # a reversal's late success: reversed; for one refund, the next reversal due or
        # fulfilled again; its dispute won meanwhile: held, or fulfilled again
        done = ("reversed", "fulfilled", "held") if w.leg == "reverse" else ("fulfilled",)
        # a settlement's void is no effect to keep: the next settlement finds the key voided
        voided = w.leg == "settle" and not w.found
        kept = voided or self.state(pk) in done or (self.state(pk) == "queued" and again)
        assert kept, f"{pk}: a late success was lost in {before}"
        if paused:
            self.gate.resume("person")
