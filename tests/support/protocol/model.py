"""The model's own account of what happened, kept beside the ledger's: the deliveries it
recorded, what was paid and taken back by Stripe's events, what a person granted, and how
an attempt ended."""

import json
from typing import Any

from ledger import keys
from ledger.deliveries import Delivery
from ledger.event_shape import data_object
from ledger.gate import Health
from ledger.money import paid_amount
from ledger.reversals import taken_of
from ledger.stored import whole
from tests.support.protocol.constants import REFUSALS, TALLY, TIE
from tests.support.protocol.state import ProtocolState
from tests.support.protocol.worker import Worker


class ProtocolModel(ProtocolState):
    """The shared state and the model's account; every actor's rules build on it."""

    def record(self, delivery: Delivery) -> None:
        event, c = delivery.event, delivery.classified
        granted = bool(c.payment_key) and self.granted_again(c.payment_key)
        answer = self.ledger.record_delivery(delivery)
        body = delivery.body
        first = event["id"] not in self.seen
        self.seen.setdefault(event["id"], body)
        if first and c.paid and not c.hold:
            self.paid.add(answer.payment_key)
        if first and c.paid:
            self.paid_by(answer.payment_key, event)
        if first and c.role == "refund":
            self.took_back(answer.payment_key, event)
        if first and event["type"] == TIE:
            self.tallied_tie(answer.payment_key)
        pk = answer.payment_key
        fenced = any(w and w.payment == pk and w.fenced_at is not None for w in self.workers)
        # a person's word that its effect exists (a possible duplicate closed as its
        # purchase's) is an effect as a call's: taken back after it, it is reversed
        done = pk in self.resolved_done
        if pk and self.taken_back(pk) and self.calls[pk] == 0 and not fenced and not done:
            self.refunded_first.add(pk)
        if granted and self.reverse and self.taken_back_now(pk):
            self.a_grant_taken_back_again_waits_for_a_person(pk)

    def tallied_tie(self, pk: str) -> None:
        """How a basil renewal's tie came (PROTOCOL_REPORT): to one record, to two (tied
        late), after one of them was called."""
        late = self.redis.hexists(keys.payment(pk), "same_purchase_as")
        TALLY["basil_tied_late" if late else "basil_tied"] += 1
        if any(self.calls[i] for ids in self.purchases if pk in ids for i in ids):
            TALLY["basil_tied_after_a_call"] += 1

    def granted_again(self, pk: str) -> bool:
        """Reversed once, then granted again (by a person, or fulfilled again after a dispute
        won), and not taken back now, by the model's own account."""
        f = self.redis.hmget(keys.payment(pk), "state", "reinstated_at", "reversed_at")
        return f[0] == b"fulfilled" and None not in f[1:] and not self.taken_back_now(pk)

    def a_grant_taken_back_again_waits_for_a_person(self, pk: str) -> None:
        """Its reversal does not run twice (its key was spent): taken back again, the payment
        is held for a person to take it back by hand, never left fulfilled silently."""
        TALLY["taken_back_again"] += 1
        f = self.redis.hmget(keys.payment(pk), "state", "by_hand", "retake")
        assert f[0] == b"held" and f[1] and f[2], f"{pk}: granted again, taken back again: {f}"

    def paid_by(self, pk: str, event: dict[str, Any]) -> None:
        """The model's own account of what was paid: the first paid event that says (a thin
        one does not)."""
        amount = paid_amount(data_object(event))
        if amount is not None and pk not in self.amounts:
            self.amounts[pk] = amount
            if self.redis.hget(keys.payment(pk), "reversal_amount") == b"":
                self.known_late.add(pk)  # its reversal was due before: what remains, unknown

    def took_back(self, pk: str, event: dict[str, Any]) -> None:
        """The model's own account of what Stripe took back (not the ledger's): a refund
        counted once per id, failed ones never; the latest charge event's figure (by its
        ``created``) and when each failed refund was made and failed (0: not dated)."""
        obj, previous = event["data"]["object"], event["data"].get("previous_attributes")
        taken = json.loads(taken_of(event["type"], obj, event.get("created"), previous) or "{}")
        mine = self.refunds.setdefault(pk, {})
        for rid, amount in taken.get("refunds", {}).items():
            if amount > 0 and mine.get(rid) != -1:
                self.counted_refunds.add((pk, rid))
            mine[rid] = -1 if -1 in (amount, mine.get(rid)) else max(amount, mine.get(rid, 0))
        failures = self.failures.setdefault(pk, {})
        for rid, (amount, made, said) in taken.get("failed", {}).items():
            had = failures.get(rid)
            if had is None or (said > 0 and (had[2] == 0 or said < had[2])):
                failures[rid] = (amount, made, said)
        if "charge_refunded" in taken:
            latest = (taken["charge_at"], taken["charge_refunded"])
            self.charges[pk] = max(self.charges.get(pk, latest), latest)
        if "dispute_status" in taken:
            closes = self.dispute_closes.setdefault(pk, {})
            kept = closes.get(taken["dispute"])
            if kept is None or taken["dispute_at"] >= kept[1]:
                closes[taken["dispute"]] = (taken["dispute_status"], taken["dispute_at"])
            # one dispute lost took the money, whatever another of the charge said
            decides = max(closes, key=lambda d: (closes[d][0] == "lost", closes[d][1], d))
            self.dispute_now[pk] = closes[decides][0]
        opened = (taken.get("dispute_at", 0), taken.get("dispute_open"), taken.get("dispute_event"))
        if opened[1] and opened[0] >= self.dispute_opened.get(pk, (-1,))[0]:
            self.dispute_opened[pk] = opened
        if taken.get("dispute_status") == "lost":
            self.lost.add(pk)
        if taken.get("dispute_status") == "won":
            self.won.add(pk)

    def refunded_in_full(self, pk: str, lower: bool = False) -> bool:
        """By the refunds counted, or the latest charge event's figure less the refunds it
        counted that failed after it: known so (``lower`` false), or maybe (``lower``: unless
        known to have failed before it)."""
        amount = self.amounts.get(pk, 0)
        counted = sum(a for a in self.refunds.get(pk, {}).values() if a > 0)
        at, charged = self.charges.get(pk, (0, 0))
        for failed, made, said in self.failures.get(pk, {}).values():
            if lower:
                off = (at == 0 or made <= at) and not 0 < said < at
            else:
                off = 0 < at and made <= at < said
            charged -= failed if off else 0
        return amount > 0 and max(counted, charged) >= amount

    def given_back(self, pk: str) -> bool:
        """Stripe may no longer take it back, by the model's own account: no dispute lost
        now, and maybe not refunded in full."""
        return self.dispute_now.get(pk) != "lost" and not self.refunded_in_full(pk, lower=True)

    def taken_back(self, pk: str) -> bool:
        return pk in self.lost or self.refunded_in_full(pk)

    def taken_back_now(self, pk: str) -> bool:
        """As the ledger judges it for a call: its last dispute closed lost, or refunded in
        full."""
        return self.dispute_now.get(pk) == "lost" or self.refunded_in_full(pk)

    def person_granted(self, pk: str, told: set[str]) -> None:
        """A person granted by hand a payment Stripe gave back: what the reversals of the
        failed refunds they were told of took, granted back, is no longer reversed (a later
        refund in full reverses it again)."""
        self.person_acted.add(pk)
        self.granted_by_hand.add(pk)
        for refund in told:
            if (pk, refund) not in self.regranted and self.reversals_applied[(pk, refund)]:
                self.regranted.add((pk, refund))
                self.reversed_total[pk] -= self.reversal_amounts[(pk, refund)]
                TALLY["failed_reversals_granted"] += 1

    def left_taken_back(self, pk: str) -> bool:
        """Fulfilled and taken back, never reversed: granted again after its reversal (a
        person's grant, a fulfilment again), only while Stripe certainly takes it back again
        (a partial refund after it is only recorded)."""
        taken = self.redis.hget(keys.payment(pk), "taken_back") or self.unreversed(pk)
        if self.redis.hget(keys.payment(pk), "reinstated_at"):
            return not self.given_back(pk)
        return bool(taken)

    def unreversed(self, pk: str) -> list[str]:
        """With REVERSAL_PER_REFUND, the refunds Stripe counted that a fulfilled payment has
        not reversed (none once reversals carried all that was paid)."""
        if not self.per_refund:
            return []
        fields = self.redis.hmget(keys.payment(pk), "rv", "reversed_amount", "amount")
        done, total, paid = json.loads(fields[0] or b"{}"), int(fields[1] or 0), whole(fields[2])
        counted = [r for r, a in self.refunds.get(pk, {}).items() if a > 0]
        return [] if paid is not None and total >= paid else [r for r in counted if r not in done]

    def finish(self, slot: int, outcome: str) -> None:
        w = self.workers[slot]
        assert w is not None
        stale = self.current_token(w.payment) != w.token
        before = self.payment_core(w.payment)
        was = self.state(w.payment)
        refused = w.outcome in REFUSALS  # jobs.py: its answer refused it, nothing applied
        detail = f"model {outcome}"
        verdict, _ = self.attempts.finish(w.payment, w.token, outcome, detail, 1.0, refused)
        if verdict not in ("stale", "already") and (refused or outcome == "not_called"):
            self.unrefused.get(w.payment, set()).discard(w.token)
            TALLY[f"{'replay_safe' if w.replay_safe else 'unsafe'}_refusals_told"] += refused
        if verdict == "fulfilled" and w.leg != "reverse":
            self.effect_on[w.payment] = w.downstream
        if stale:
            assert self.payment_core(w.payment) == before, "a stale token changed state"
        elif outcome == "fulfilled":
            self.calls_at_success.setdefault(w.payment, self.calls[w.payment])
            if verdict in ("fulfilled", "reversed") and was != "in_progress":
                self.proved.add(w.payment)
                TALLY["late_receipts"] += 1
        self.workers[slot] = None

    def witness(self, w: Worker, health: Health) -> None:
        """What the breaker heard, as workers/gating.py report() tells it: a down failure
        always (a refusal by its customer and token; unsent: by its payment, token -1), an
        up answer only while it counts or for a probe."""
        witnesses = self.witnesses[w.breaker.action]
        if health.kind == "down":
            witnesses.add((self.party(w.payment), w.token) if health.sent else (w.payment, -1))
        elif health.kind == "up" and (w.admission.dirty or w.admission.probe):
            witnesses.clear()
