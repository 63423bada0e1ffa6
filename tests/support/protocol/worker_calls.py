"""A worker's call to its downstream, by leg: a fulfilment, a reversal, a settlement or a
fulfilment again, each checked against the model's account before it is counted."""

import hypothesis.strategies as st
from hypothesis.stateful import rule

from tests.support.protocol.constants import OUTCOMES, TALLY, WINDOW_MS, WORKERS
from tests.support.protocol.model import ProtocolModel
from tests.support.protocol.worker import Worker


class WorkerCalls(ProtocolModel):
    """The ``worker_calls`` rule and the checks of each leg's call."""

    @rule(slot=st.integers(0, WORKERS - 1), outcome=st.sampled_from(OUTCOMES), hit=st.booleans())
    def worker_calls(self, slot: int, outcome: str, hit: bool) -> None:
        w = self.workers[slot]
        if w is None or w.fenced_at is None or w.outcome:
            return
        if self.real - w.fenced_at > WINDOW_MS:  # jobs.py: too late to call, say so
            self.finish(slot, "not_called")
            return
        if w.leg == "reverse":
            self.reversal_call(w, outcome, hit)
            return
        if w.leg == "refulfil":
            self.refulfil_call(w, outcome, hit)
            return
        if w.leg == "settle":
            self.settle_call(w, outcome, hit)
            return
        if w.payment in self.voided:  # its key voided: the action refuses, applies nothing
            outcome = "permanent"
        self.calls[w.payment] += 1
        if w.payment in self.maybe_applied and not w.replay_safe:
            self.again[w.payment] += 1
        if outcome in ("ok", "ambiguous"):  # a refusal (transient, permanent) applied nothing
            self.maybe_applied.add(w.payment)
        if outcome == "ok" or (outcome == "ambiguous" and hit):
            self.applied[w.payment] += 1
            self.unsafe_applied[w.payment] += 0 if w.replay_safe else 1
            self.applied_on.setdefault(w.payment, set()).add(w.downstream)
        w.outcome = outcome

    def reversal_call(self, w: Worker, outcome: str, hit: bool) -> None:
        """A reversal's call: only once the payment's effect exists, never twice; per refund
        (REVERSAL_PER_REFUND) only for a refund Stripe counted, with an amount, and all of
        them together never more than was paid."""
        pk, key = w.payment, (w.payment, w.refund)
        effect = self.applied[pk] > 0 or pk in self.resolved_done | self.granted_by_hand
        assert effect, f"{pk}: a reversal called without an effect"
        other = self.closed_as.get(pk)
        assert not other, f"{pk}: reversed under its own key, its purchase's effect is {other}'s"
        # where its worker's deployment checked it (a move since leaves that worker's actions)
        where = self.effect_on.get(pk, w.deployed)
        assert where == w.deployed, f"{pk}: reversed with the action moved from {where}"
        if w.amount is None:  # what remains, of an amount paid no event said
            known = pk in self.amounts and pk not in self.known_late
            assert not known, f"{pk}: paid {self.amounts.get(pk)}, reversed unknown"
            assert not w.refund, f"{pk}: {w.refund} reversed without its amount"
        elif w.amount == 0:  # what remains, once the refunds' own reversals carried it all
            assert not w.refund and pk in self.amounts, f"{pk}: {w.refund} reversed for nothing"
            carried = self.reversed_total[pk] >= self.amounts[pk] or pk in self.person_reversed
            assert carried, f"{pk}: reversed for nothing, {self.reversed_total[pk]} reversed"
            TALLY["reversals_of_nothing_left"] += 1
        else:
            assert w.amount > 0, f"{pk}: a reversal of {w.amount}"
        if w.refund:
            assert self.per_refund, f"{pk}: a reversal of one refund without REVERSAL_PER_REFUND"
            # counted when its reversal was due; it may have failed since (not withdrawn)
            assert (pk, w.refund) in self.counted_refunds, f"{pk}: {w.refund} not counted"
        self.reversal_calls[pk] += 1
        if key in self.reversal_maybe_applied:
            self.reversal_again[key] += 1
        if outcome in ("ok", "ambiguous"):
            self.reversal_maybe_applied.add(key)
        if outcome == "ok" or (outcome == "ambiguous" and hit):
            if not self.reversals_applied[key]:
                self.reversed_total[pk] += w.amount or 0
                self.reversal_amounts[key] = w.amount or 0
                reached = w.paid is not None and self.reversed_total[pk] >= w.paid
                if not w.refund or reached:
                    self.told_in_full.add(pk)
            self.reversals_applied[key] += 1
            paid = self.amounts.get(pk)
            assert paid is None or self.reversed_total[pk] <= paid, f"{pk}: reversed more than paid"
        w.outcome = outcome

    def settle_call(self, w: Worker, outcome: str, hit: bool) -> None:
        """A settlement: only of a replay-safe action that settles, for a payment taken back
        after an attempt that may have called; one transaction that finds the payment's key
        (an effect applied under it) or voids it (none can apply after)."""
        pk = w.payment
        assert self.settles, f"{pk}: settled by an action that cannot"
        assert self.taken_back(pk), f"{pk}: settled while not taken back"
        called = self.calls[pk] > 0 or pk in self.may_have_called
        assert called or pk in self.resolved_done, f"{pk}: settled before any attempt"
        self.settle_calls[pk] += 1
        if outcome == "ok" or (outcome == "ambiguous" and hit):  # the transaction committed
            w.found = self.applied[pk] > 0
            if not w.found:
                self.voided.add(pk)
        w.outcome = outcome

    def refulfil_call(self, w: Worker, outcome: str, hit: bool) -> None:
        """A fulfilment again after a dispute won: only under REVERSAL_DISPUTE_WON=fulfil,
        once its dispute was won and its effect reversed."""
        pk = w.payment
        assert self.dispute_won == "fulfil", f"{pk}: fulfilled again without the setting"
        assert pk in self.won, f"{pk}: fulfilled again without a dispute won"
        reversed_ = any(n for (p, _), n in self.reversals_applied.items() if p == pk)
        assert reversed_ or pk in self.person_reversed, f"{pk}: fulfilled again, never reversed"
        paid = self.amounts.get(pk)
        if paid is not None and pk not in self.known_late and self.per_refund:
            # the refunds reversed on their own that stand keep theirs (not failed since, nor
            # granted back by a person): it grants again what the dispute's reversal took
            mine = self.refunds.get(pk, {})
            standing = sum(
                self.reversal_amounts[(p, r)]
                for (p, r), n in self.reversals_applied.items()
                if p == pk and r and n and mine.get(r) != -1 and (p, r) not in self.regranted
            )
            assert w.amount == paid - standing, f"{pk}: grants {w.amount} again, {standing} stand"
            TALLY["regrants_less_what_stands" if standing else "regrants_whole"] += 1
        self.refulfil_calls[pk] += 1
        if pk in self.refulfil_maybe_applied and not w.replay_safe:
            self.refulfil_again[pk] += 1
        if outcome in ("ok", "ambiguous"):
            self.refulfil_maybe_applied.add(pk)
        if outcome == "ok" or (outcome == "ambiguous" and hit):
            self.refulfils_applied[pk] += 1
            self.refulfil_unsafe_applied[pk] += 0 if w.replay_safe else 1
            self.refulfil_applied_on.setdefault(pk, set()).add(w.downstream)
        w.outcome = outcome
