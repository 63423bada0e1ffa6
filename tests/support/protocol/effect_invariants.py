"""Invariants of the effects, after every step: one effect per payment and per purchase,
no call after a success or after the payment was taken back first, a voided key or a
payment refunded_unfulfilled without an effect."""

import json

from hypothesis.stateful import invariant

from ledger import keys
from ledger.stored import whole
from tests.support.protocol.constants import TALLY
from tests.support.protocol.model import ProtocolModel


class EffectInvariants(ProtocolModel):
    """The effects' invariants (docs/LEDGER.md, "The protocol's invariants")."""

    @invariant()
    def one_effect_per_payment(self) -> None:
        if not hasattr(self, "calls"):
            return
        for pk, n in self.unsafe_applied.items():
            assert n <= 1, f"{pk}: {n} effects on a downstream that does not dedupe"
        for pk, n in self.again.items():
            assert n == 0, f"{pk}: a non-replay-safe action called again after it may have applied"
        if not self.reversal_replay_safe:
            for key, n in self.reversals_applied.items():
                assert n <= 1, f"{key}: {n} reversals on a downstream that does not dedupe"
            for key, n in self.reversal_again.items():
                assert n == 0, f"{key}: a reversal called again after it may have applied"
        for pk, n in self.refulfil_unsafe_applied.items():  # the fulfilment's downstream
            assert n <= 1, f"{pk}: fulfilled again {n} times on a downstream that does not dedupe"
        for pk, n in self.refulfil_again.items():
            assert n == 0, f"{pk}: fulfilled again after it may have been"
        for pk, where in self.applied_on.items():  # a person's retry is their own word
            assert len(where) <= 1 or pk in self.person_acted, f"{pk}: applied on {where}"
        for pk, where in self.refulfil_applied_on.items():
            assert len(where) <= 1 or pk in self.person_acted, f"{pk}: again on {where}"
        for pk in self.all_payments():
            self.one_recorded_effect_per_leg(pk, self.redis.hgetall(keys.payment(pk)))

    def one_recorded_effect_per_leg(self, pk: str, fields: dict[bytes, bytes]) -> None:
        """One recorded fulfilment, one reversal per refund (``rv``) and one of the whole
        payment or what remains of it, one fulfilment again; ``rv`` only grows."""
        done = [  # by the leg each attempt records: a reversal's, or not
            json.loads(v).get("leg") == "reverse"
            for k, v in fields.items()
            if k.startswith(b"attempt:") and json.loads(v).get("outcome") == "fulfilled"
        ]
        per_refund = json.loads(fields.get(b"rv", b"{}"))
        reversed_amount = int(fields.get(b"reversed_amount", 0))
        rest = int(fields.get(b"rest_reversed", 0))  # of the whole payment or what remains
        again = int(b"refulfilled_at" in fields)
        assert len(done) <= 1 + len(per_refund) + rest + again, f"{pk}: too many recorded effects"
        if not per_refund and not again:
            assert done.count(False) <= 1, f"{pk}: more than one recorded effect"
            assert done.count(True) <= 1, f"{pk}: more than one recorded reversal"
        kept = self.__dict__.setdefault("rv_seen", {}).get(pk, {})
        assert all(per_refund.get(r) == a for r, a in kept.items()), f"{pk}: rv lost {kept}"
        self.rv_seen[pk] = per_refund
        paid = whole(fields.get(b"amount"))  # None: not known, only a thin event paid it
        assert paid is None or reversed_amount <= paid, f"{pk}: {reversed_amount} of {paid} paid"
        if fields.get(b"state") == b"reversed":
            assert b"reversal_from" in fields, f"{pk}: reversed without a reversal due"

    @invariant()
    def one_effect_per_purchase(self) -> None:
        """Stripe may tie a purchase's ids late (a Checkout session naming its invoice and
        PaymentIntent after both were recorded): its records together have one effect."""
        if not hasattr(self, "purchases"):
            return
        for ids in self.purchases:
            with_effect = sorted(pk for pk in ids if self.applied[pk])
            assert len(with_effect) <= 1, f"one purchase, effects under {with_effect}"

    @invariant()
    def only_paid_payments_are_called(self) -> None:
        if hasattr(self, "calls"):
            assert set(self.calls) <= self.paid, set(self.calls) - self.paid

    @invariant()
    def a_success_is_never_followed_by_another_call(self) -> None:
        """The success of a payment's current attempt is kept, however late it arrives (after
        its lease expired, a person's retry, the gate's deferral): no call follows it."""
        if not hasattr(self, "calls_at_success"):
            return
        for pk, n in self.calls_at_success.items():
            assert self.calls[pk] == n, f"{pk}: called again after its current attempt succeeded"

    @invariant()
    def never_fulfilled_once_refunded_first(self) -> None:
        """A payment taken back (refunded in full, a dispute lost) before any fulfilment call
        is never called, whatever REVERSAL_ACTION says."""
        if not hasattr(self, "refunded_first"):
            return
        for pk in self.refunded_first:
            assert self.calls[pk] == 0, f"{pk}: fulfilled after it was refunded"
            # but a person's grant, once Stripe gave it back, is taken back as any effect
            granted = pk in self.granted_by_hand
            assert self.reversal_calls[pk] == 0 or granted, f"{pk}: reversed without an effect"

    @invariant()
    def a_voided_key_never_has_an_effect(self) -> None:
        """A settlement voids a payment's key only when no effect holds it, and none can
        apply after; the payment ends refunded_unfulfilled, never called again."""
        if not hasattr(self, "voided"):
            return
        for pk in self.voided:
            assert self.applied[pk] == 0, f"{pk}: an effect under a voided key"
            assert pk not in self.resolved_done, f"{pk}: voided, then a person found an effect"
            state = self.state(pk)  # held: its settlement's answer lost, its budget spent
            settled = ("queued", "in_progress", "retrying", "refunded_unfulfilled", "held")
            by_hand = state == "fulfilled" and pk in self.granted_by_hand
            assert state in settled or by_hand, f"{pk}: voided, then {state}"

    @invariant()
    def refunded_unfulfilled_has_no_effect(self) -> None:
        """A payment ends refunded_unfulfilled only with no effect: none applied by a call
        (one that may have applied is settled or held first), none a person found."""
        if not hasattr(self, "applied"):
            return
        for pk in self.all_payments():
            if self.state(pk) == "refunded_unfulfilled":
                assert self.applied[pk] == 0, f"{pk}: refunded_unfulfilled with an effect"
                assert pk not in self.resolved_done, f"{pk}: refunded_unfulfilled, found applied"

    @invariant()
    def a_refusal_never_holds_a_refund(self) -> None:
        """A refused call applied nothing: a payment taken back is held as one a replay-safe
        call may have applied only while such a call of it started that its own live word did
        not end as refused, never sent or never made (one before a refusal stays so)."""
        if not hasattr(self, "applied"):
            return
        for pk in self.all_payments():
            by_hand = self.redis.hexists(keys.payment(pk), "by_hand")
            held = self.held_after_refund(pk) and not by_hand
            assert not held or self.unrefused.get(pk), f"{pk}: held, every call refused"
            if self.state(pk) == "refunded_unfulfilled" and pk in self.may_have_called:
                if pk not in self.voided and pk not in self.ended_after_a_call:
                    self.ended_after_a_call.add(pk)  # no settlement voided it: refusals did
                    TALLY["refunded_unfulfilled_after_a_replay_safe_call"] += 1
