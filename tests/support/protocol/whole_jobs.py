"""Rules that run a worker's whole job in one step (take, fence, call, finish), with the
downstream's faults: down, refusing connections, a quota on one payment or one customer,
the gate's replies lost and sent again."""

import hypothesis.strategies as st
from hypothesis.stateful import precondition, rule

from tests.support.protocol.constants import OUTCOMES, TALLY
from tests.support.protocol.worker_jobs import WorkerJobs


class WholeJobs(WorkerJobs):
    """Whole jobs in one step, so short programs reach the breaker and late ties often."""

    @precondition(lambda self: None in self.workers)
    @rule(outcome=st.sampled_from(OUTCOMES), hit=st.booleans())
    def worker_runs_a_whole_job(self, outcome: str, hit: bool) -> None:
        """Take, fence, call and finish in one step."""
        slot = self.workers.index(None)
        self.worker_takes_a_job()
        if self.workers[slot] is None:
            return
        self.worker_fences(slot)
        self.worker_calls(slot, outcome, hit)
        self.worker_finishes(slot)

    @precondition(lambda self: None in self.workers)
    @rule()
    def worker_fulfils_the_next_job(self) -> None:
        """The common case in one step (take, fence, call, finish with no fault), so the
        orders of deliveries and completed attempts that late ties need come up often."""
        slot = self.workers.index(None)
        self.worker_takes_a_job()
        self.worker_fences(slot)
        self.worker_calls(slot, "ok", True)
        self.worker_finishes(slot)

    @precondition(lambda self: None in self.workers)
    @rule(outcome=st.sampled_from(OUTCOMES), hit=st.booleans())
    def worker_runs_a_whole_job_sending_twice(self, outcome: str, hit: bool) -> None:
        """A whole job whose admission and report are each sent again, their replies lost
        (ledger/connection.py retries a command): the gate's and the breaker's scripts."""
        self.sending_twice = True
        try:
            self.worker_runs_a_whole_job(outcome, hit)
        finally:
            self.sending_twice = False

    @precondition(lambda self: None in self.workers)
    @rule(never_sent=st.booleans(), twice=st.booleans())
    def downstream_down_for_a_job(self, never_sent: bool, twice: bool) -> None:
        """A whole job against a downstream that is down (refused, or a 503): its own rule,
        so short programs open the breaker and reach its probes as often as other steps;
        ``twice``: its admission and report are each sent again, their replies lost."""
        outcome = "refused" if never_sent else "down"
        if twice:
            self.worker_runs_a_whole_job_sending_twice(outcome, False)
        else:
            self.worker_runs_a_whole_job(outcome, False)

    @precondition(lambda self: None in self.workers)
    @rule(down=st.sampled_from(("fulfilment", "reversal")), never_sent=st.booleans())
    def one_downstream_is_down(self, down: str, never_sent: bool) -> None:
        """A whole job while one downstream is down (refused, or a 503) and the other
        answers: FULFILMENT_ACTION's (the legs fulfil, settle, refulfil) or REVERSAL_ACTION's
        (reverse). On one downstream (REVERSAL_ACTION not apart) both are down."""
        slot = self.workers.index(None)
        self.worker_takes_a_job()
        w = self.workers[slot]
        if w is None:
            return
        called = (
            ("reversal" if w.leg == "reverse" else "fulfilment") if self.reversal_apart else down
        )
        TALLY[f"{down}_down_{'its' if called == down else 'other'}_call"] += 1
        self.worker_fences(slot)
        self.worker_calls(
            slot, ("refused" if never_sent else "down") if called == down else "ok", True
        )
        self.worker_finishes(slot)

    @precondition(lambda self: None in self.workers)
    @rule()
    def downstream_refuses_one_payment_alone(self) -> None:
        """A per-customer quota: the downstream answers one payment of the program (the first
        it is asked for here) 429 with Retry-After every time, and the others as usual, so
        the same payment is refused again while others succeed."""
        self.one_payment_answered("poison", "quota")

    @precondition(lambda self: None in self.workers)
    @rule()
    def one_payment_is_never_sent(self) -> None:
        """One payment of the program (the first it is asked for here) never leaves, every
        time (its code raises DownstreamDown(sent=False) of itself: a licence server down for
        its product), and the others are answered as usual: one witness, however often."""
        self.one_payment_answered("never_sent", "refused")

    def one_payment_answered(self, chosen: str, outcome: str) -> None:
        """A whole job whose call is answered ``outcome`` if its payment is the one kept as
        ``chosen`` (the first this asks for), else as usual."""
        slot = self.workers.index(None)
        self.worker_takes_a_job()
        w = self.workers[slot]
        if w is None:
            return
        payment = self.__dict__.setdefault(chosen, w.payment)
        self.worker_fences(slot)
        self.worker_calls(slot, outcome if w.payment == payment else "ok", True)
        self.worker_finishes(slot)

    @precondition(lambda self: None in self.workers)
    @rule()
    def downstream_refuses_one_customer(self) -> None:
        """A per-customer quota: the downstream answers every payment of one customer (the
        first it is asked for here; its payment alone when it has none) 429 with
        Retry-After, and the others as usual; with one customer for both card purchases
        (``one_customer``) two payments are refused, one witness."""
        slot = self.workers.index(None)
        self.worker_takes_a_job()
        w = self.workers[slot]
        if w is None:
            return
        quota = self.__dict__.setdefault("quota_party", self.party(w.payment))
        self.worker_fences(slot)
        refused = self.party(w.payment) == quota
        TALLY["customer_quota_refusals" if refused else "customer_quota_others"] += 1
        self.worker_calls(slot, "quota" if refused else "ok", True)
        self.worker_finishes(slot)
