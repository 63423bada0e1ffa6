"""Invariants of the reversals, after every step (docs/REVERSAL.md): a dispute shown while
open, given back never left taken back (nor said so while held), ``reversed`` only once the
action heard it taken back in full, taken back never a dead letter."""

from hypothesis.stateful import invariant

from ledger import keys
from ledger.read.reversal import open_dispute
from tests.support.protocol.constants import MAY_HAVE_APPLIED, TALLY
from tests.support.protocol.model import ProtocolModel


class ReversalInvariants(ProtocolModel):
    """The reversals' invariants."""

    @invariant()
    def an_open_dispute_is_shown_until_a_close_of_its_id(self) -> None:
        """The payment's view names its dispute's latest event (by its ``created``) while no
        closed dispute has its id, from the payment's own fields (its events may expire)."""
        if not hasattr(self, "dispute_opened"):
            return
        for pk in self.all_payments():
            raw = self.redis.hgetall(keys.payment(pk))
            f = {k.decode(): v.decode() for k, v in raw.items()}
            opened = self.dispute_opened.get(pk)
            closed = self.dispute_closes.get(pk, {})
            shown = opened and opened[1] not in closed and opened[2] or None
            assert open_dispute(f, ()) == shown, (pk, f.get("dispute_open"), f.get("dispute"))
            if shown:
                TALLY["dispute_shown_open"] += 1

    @invariant()
    def a_fulfilment_again_that_may_have_applied_is_not_withdrawn(self) -> None:
        """A fulfilment again whose call may have applied (an answer, or none), then taken
        back before it was done, is held for a person to take it back by hand, never
        `reversed` as if nothing had been granted."""
        if not hasattr(self, "refulfil_maybe_applied"):
            return
        for pk in self.refulfil_maybe_applied:
            assert self.state(pk) != "reversed", f"{pk}: reversed, its re-grant may exist"

    @invariant()
    def given_back_is_never_left_taken_back(self) -> None:
        """A payment settled as taken back (refunded_unfulfilled, reversed) that Stripe no
        longer takes back (its refund failed, its dispute won) does not stay so: held for a
        person, or fulfilled again (REVERSAL_DISPUTE_WON=fulfil)."""
        if not hasattr(self, "dispute_now"):
            return
        for pk in self.all_payments():
            if self.state(pk) in ("refunded_unfulfilled", "reversed"):
                assert not self.given_back(pk), f"{pk}: {self.state(pk)}, though given back"

    @invariant()
    def a_hold_after_a_taking_says_whether_it_is_taken_back_now(self) -> None:
        """Held after it was taken back while a replay-safe call may have applied it: its
        reason says taken back (refunded in full, a dispute lost: resolve as not applied, or
        as fulfilled) exactly while the ledger takes it back, and given back (retry it, or
        resolve it as fulfilled) once it no longer does, so a person is offered what they
        can do."""
        if not hasattr(self, "dispute_now"):
            return
        for pk in self.all_payments():
            f = self.redis.hmget(keys.payment(pk), "state", "by_hand", "leg", "hold_reason")
            reason = (f[3] or b"").decode()
            if f[:3] != [b"held", None, None] or MAY_HAVE_APPLIED not in reason:
                continue
            said_taken = reason.startswith(("refunded in full", "dispute lost"))
            assert said_taken == self.taken_back_now(pk), (pk, reason)
            TALLY["held_after_a_taking_" + ("taken_back" if said_taken else "given_back")] += 1

    @invariant()
    def reversed_only_once_its_action_heard_it_taken_back_in_full(self) -> None:
        """``reversed`` is never a marker alone: the reversal action applied a reversal of the
        whole payment or of what remains (refund id null), or one of a refund whose call
        carried the amount paid and brought the reversals up to it; or a person said a
        reversal applied. Refunds reversed while the amount paid was not known (a thin event
        paid it) carry no amount paid: when it comes, what remains (0) is reversed."""
        if not hasattr(self, "told_in_full"):
            return
        by_person = self.person_reversed | self.taken_back_by_hand
        for pk in self.all_payments():
            if self.state(pk) == "reversed":
                assert pk in self.told_in_full | by_person, f"{pk}: reversed, its action not told"

    @invariant()
    def a_reversed_refund_that_failed_is_not_left_fulfilled(self) -> None:
        """REVERSAL_PER_REFUND: a payment fulfilled again after a refund's own reversal, whose
        refund then failed (the customer paid in full, part of the effect taken back), does
        not stay fulfilled silently: held for a person (by_hand) once for that refund, which
        stays dealt with once the person resolved it."""
        if not hasattr(self, "failed_reversals_held"):
            return
        for pk in self.all_payments():
            failed = self.failed_reversals(pk)
            seen = self.failed_reversals_held.setdefault(pk, set())
            if self.state(pk) == "held" and self.redis.hexists(keys.payment(pk), "by_hand"):
                TALLY["failed_reversals_held"] += len(failed - seen)
                seen |= failed
            elif self.state(pk) == "fulfilled" and self.leg(pk) == "fulfil":
                assert failed <= seen, f"{pk}: fulfilled, {failed - seen} failed after reversal"

    @invariant()
    def taken_back_is_never_a_dead_letter(self) -> None:
        """Taken back once its fulfilment's attempt is over (its worker answered, or the
        sweeper ended its lease, its budget's last one too), a payment is settled, held or
        never fulfilled: never left failed in its fulfilment leg for a person to find."""
        if not hasattr(self, "refunds"):
            return
        for pk in self.all_payments():
            if self.state(pk) == "failed" and self.leg(pk) == "fulfil":  # (a dispute won since
                # its loss, some refunds failed: no longer taken back, it may fail as any)
                assert not self.taken_back_now(pk), f"{pk}: failed, though taken back"

    @invariant()
    def a_reversal_only_with_reversal_on(self) -> None:
        if not hasattr(self, "reversal_calls") or self.reverse:
            return
        assert not self.reversal_calls, "a reversal called with REVERSAL_ACTION unset"
        assert not self.refulfil_calls, "fulfilled again with REVERSAL_ACTION unset"
        for pk in self.all_payments():  # a settlement is no reversal
            assert self.redis.hget(keys.payment(pk), "leg") in (None, b"settle"), pk

    @invariant()
    def a_payment_closed_as_another_records_is_reversed_only_by_hand(self) -> None:
        """One purchase, one effect, one reversal: a payment a person closed as fulfilled
        while it was held as the same purchase as another record has no effect under its own
        key. The ledger keeps whose effect it is (``effect_of``) and never reverses it
        (reversal_call: a reversal of nothing); it is ``reversed`` only by a person's word."""
        if not hasattr(self, "closed_as"):
            return
        for pk, other in self.closed_as.items():
            f = self.redis.hmget(keys.payment(pk), "state", "effect_of")
            assert f[1] == other.encode(), f"{pk}: closed as {other}'s, effect_of {f[1]!r}"
            assert self.reversal_calls[pk] == 0, f"{pk}: reversed under its own key"
            by_hand = pk in self.taken_back_by_hand
            assert f[0] != b"reversed" or by_hand, f"{pk}: reversed, not by a person"
