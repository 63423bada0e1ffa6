"""Invariants of the ledger's own bookkeeping, after every step: the breakers (on evidence
beyond one customer, each on its own downstream), attempt records, retrying ages, tokens,
the counts and indexes, the waiting sets, and terminal states."""

import json
from collections import Counter

from hypothesis.stateful import invariant

from ledger import keys
from ledger.read import payments
from tests.support.protocol.constants import BREAKERS, LOOP
from tests.support.protocol.model import ProtocolModel


class LedgerInvariants(ProtocolModel):
    """The gate's and the ledger's bookkeeping invariants."""

    @invariant()
    def the_breaker_opens_only_on_evidence_beyond_one_customer(self) -> None:
        """Open only when the down failures reported since the last up answer are more than
        one customer's refusals (a payment of no customer stands for itself): another
        customer refused, or a request that never left. A per-customer quota refuses every
        payment of that customer and says nothing of the others. Each breaker on its own
        downstream's calls alone."""
        if not hasattr(self, "witnesses"):
            return
        for b in BREAKERS:
            if self.redis.hget(b.state, "state") != b"open":
                continue
            witnesses = self.witnesses[b.action]
            refused = {party for party, token in witnesses if token >= 0}
            unsent = {pk for pk, token in witnesses if token < 0}
            assert unsent or len(refused) >= 2, f"{b.action} open on one's word: {witnesses}"
            # one payment's requests that never left are one witness however often (its code
            # may say DownstreamDown(sent=False) of itself): with it alone a breaker whose
            # threshold is above one stays closed
            alone = len(refused) + len({("unsent", pk) for pk in unsent}) < 2
            assert not (alone and self.settings.BREAKER_THRESHOLD > 1), (b.action, witnesses)

    @invariant()
    def an_outage_of_one_downstream_never_opens_the_others_breaker(self) -> None:
        """A breaker is open only on down answers of its own downstream's calls since its
        last up one: with REVERSAL_ACTION apart, the reversal downstream down never opens
        the fulfilment breaker, nor the other way; with one downstream, one breaker."""
        if not hasattr(self, "witnesses"):
            return
        for b in BREAKERS:
            if not self.witnesses[b.action]:
                state = self.redis.hget(b.state, "state")
                assert state != b"open", f"the {b.action} breaker open on another's outage"
        if not self.reversal_apart:
            assert not self.redis.exists(keys.REVERSAL_BREAKER.state), "a second breaker"
            assert not self.redis.zcard(keys.waiting(keys.REVERSAL_BREAKER.wait))

    @invariant()
    def refunds_keep_one_attempt_record(self) -> None:
        """A refunded attempt keeps no record once a later one is refunded: however long an
        outage lasts, a payment's hash holds its counted attempts and one refunded one."""
        for pk in self.all_payments():
            fields = self.redis.hgetall(keys.payment(pk))
            records = [json.loads(v) for k, v in fields.items() if k.startswith(b"attempt:")]
            assert sum(1 for r in records if "refunded" in r) <= 1, f"{pk}: {records}"

    @invariant()
    def retrying_age_only_grows(self) -> None:
        """While a payment goes round queued, in_progress and retrying, the time it started
        retrying stays put (the alert on the oldest retrying payment's age can fire), and
        the retrying index is scored by it."""
        if not hasattr(self, "retrying_since"):
            return
        for pk in self.all_payments():
            state = self.state(pk)
            if state not in LOOP:
                self.retrying_since.pop(pk, None)
                continue
            score = self.redis.zscore(keys.state_index("retrying"), pk)
            if not self.redis.hexists(keys.payment(pk), "retrying_since"):
                # a new loop: it left it within the last step (fulfilled, then its
                # reversal due, or a reversal done and the next one due)
                self.retrying_since.pop(pk, None)
            was = self.retrying_since.get(pk)
            if state == "retrying":
                assert was is None or score == was, f"{pk}: retrying since {was}, now {score}"
                self.retrying_since[pk] = float(score or 0)

    @invariant()
    def tokens_only_grow(self) -> None:
        if not hasattr(self, "tokens"):
            return
        for pk in self.all_payments():
            token = self.current_token(pk)
            assert token >= self.tokens.get(pk, 0), f"{pk}: token went back"
            self.tokens[pk] = token

    @invariant()
    def counts_match_the_payments(self) -> None:
        if not hasattr(self, "tokens"):
            return
        states = {pk: self.state(pk) for pk in self.all_payments()}
        counted = {
            k.decode(): int(v) for k, v in self.redis.hgetall(keys.PAYMENT_STATE_COUNTS).items()
        }
        assert {s: n for s, n in counted.items() if n} == dict(Counter(states.values()))
        for state in payments.PAYMENT_STATES:
            indexed = {m.decode() for m in self.redis.zrange(keys.state_index(state), 0, -1)}
            assert indexed == {pk for pk, s in states.items() if s == state}, state

    @invariant()
    def waiting_sets_hold_the_payments_that_wait(self) -> None:
        """A payment deferred at the gate is in the set of its reason while it is on its way
        back to the gate (retrying, then queued), and in none once it leaves that way."""
        if not hasattr(self, "tokens"):
            return
        for reason in keys.WAIT_REASONS:
            members = {m.decode() for m in self.redis.zrange(keys.waiting(reason), 0, -1)}
            marked = set()
            for pk in self.all_payments():
                if self.redis.hget(keys.payment(pk), "waiting") == reason.encode():
                    assert self.state(pk) in ("retrying", "queued"), (pk, self.state(pk))
                    marked.add(pk)
            assert members == marked, (reason, members ^ marked)

    @invariant()
    def terminal_stays_terminal_unless_a_person_acts(self) -> None:
        if not hasattr(self, "last_state"):
            return
        for pk in self.all_payments():
            now, was = self.state(pk), self.last_state.get(pk)
            reversing = self.leg(pk) == "reverse"
            refulfil = self.leg(pk) == "refulfil"
            reinstated = self.redis.hget(keys.payment(pk), "reinstated_at") is not None
            if was == "refunded_unfulfilled" and reinstated:  # given back: a person's
                assert now in (was, "held"), f"{pk}: {was} became {now}"
            elif was == "refunded_unfulfilled" or (was == "reversed" and not reinstated):
                assert now == was, f"{pk}: {was} became {now}"
            if was == "reversed" and reinstated:  # given back: held, or fulfilled again
                again = now == "queued" and refulfil and self.dispute_won == "fulfil"
                assert now in ("reversed", "held") or again, f"{pk}: reversed became {now}"
            # held for a refund that failed after its own reversal (REVERSAL_PER_REFUND)
            failed_after = bool(self.failed_reversals(pk))
            # held to be taken back by hand (granted again, taken back again), or, given back
            # before a person resolved that, to make sure it is granted: by hand either way
            retake = self.redis.hexists(keys.payment(pk), "retake") or (
                reinstated and self.redis.hexists(keys.payment(pk), "by_hand")
            )
            if was == "fulfilled":  # or its reversal is due (REVERSAL_ACTION; deferred at the gate)
                held = now == "held" and (failed_after or retake)
                due = now in ("queued", "retrying") and reversing
                assert now == "fulfilled" or due or held, f"{pk}: {now}"
            if was in ("failed", "held") and pk not in self.person_acted | self.proved:
                # or taken back before any effect, or after one that may have applied: settled;
                # held as given back after its reversal, then taken back again: reversed
                settling = now == "queued" and self.leg(pk) == "settle"
                again = now == "reversed" and self.redis.hexists(keys.payment(pk), "reversed_at")
                # held for a failed reversed refund, then taken back again: as fulfilled
                back = was == "held" and failed_after and self.taken_back(pk)
                going_on = back and (now == "fulfilled" or (now == "queued" and reversing))
                assert (
                    now in (was, "refunded_unfulfilled", "held") or settling or again or going_on
                ), f"{pk}: {was} -> {now}"
            if was == "interrupted" and pk not in self.person_acted:
                # Only its own attempt may lift it: a late receipt, or its word it never called.
                lifted = ("interrupted", "fulfilled", "retrying", "reversed", "queued")
                assert now in lifted, f"{pk}: became {now}"
                assert now != "queued" or reversing, f"{pk}: interrupted became queued"
            self.last_state[pk] = now
        self.person_acted.clear()
        self.proved.clear()
