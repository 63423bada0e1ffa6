"""The explorer's machine driven by hand: payments only a thin event paid (no amount), their
reversals of what remains and of each refund, and the amount coming late."""

import pytest

from ledger import keys
from ledgerctl.reversal_check import from_marks, ledger_marks
from tests.support.processes import RedisServer
from tests.support.protocol.by_hand import machine_by_hand
from tests.support.protocol.constants import PAYING, THIN_PAYING
from tests.support.protocol.machine import Protocol


def fulfilled_by_its_thin_event(server: RedisServer, per_refund: bool) -> tuple[Protocol, str]:
    """A program driven by hand, REVERSAL_ACTION set: a payment paid only by its thin event
    (no amount), fulfilled."""
    m = machine_by_hand(server, seed=0, replay_safe=False, reverse=True, per_refund=per_refund)
    thin = next(i for i, (e, _) in enumerate(m.events) if e["type"] == THIN_PAYING)
    pk = m.events[thin][0]["related_object"]["id"]
    m.deliver(thin)
    m.worker_fulfils_the_next_job()
    return m, pk


def reverses_what_remains_not_known(m: Protocol) -> None:
    """Worker 0 takes the reversal due, of what remains with its amount not known (None),
    and calls it with success."""
    m.worker_takes_a_job()
    worker = m.workers[0]
    assert worker is not None and worker.leg == "reverse"
    assert (worker.refund, worker.amount) == ("", None)
    m.worker_fences(0)
    m.worker_calls(0, "ok", True)
    m.worker_finishes(0)


@pytest.mark.parametrize("per_refund", [False, True])
def test_a_payment_only_a_thin_event_paid_is_reversed_for_what_remains(
    protocol_redis: RedisServer, per_refund: bool
) -> None:
    """Found by the explorer (seed 303, thin events in the pool): paid only by its thin event
    (no amount), fulfilled, then a dispute closed lost. Its reversal carried `amount` 0, a
    reversal of nothing; with REVERSAL_PER_REFUND it was never due. Now its amount is None
    (what remains, not known), and with REVERSAL_PER_REFUND a refund before it is reversed
    for its own amount first."""
    m, pk = fulfilled_by_its_thin_event(protocol_redis, per_refund)
    assert m.state(pk) == "fulfilled" and pk not in m.amounts
    if per_refund:
        m.deliver(m.pool_event("refund.created", pk))
        m.worker_takes_a_job()
        worker = m.workers[0]
        assert worker is not None and worker.refund and worker.amount and worker.amount > 0
        m.worker_fences(0)
        m.worker_calls(0, "ok", True)
        m.worker_finishes(0)
        assert m.state(pk) == "fulfilled"
    m.deliver(m.pool_event("charge.dispute.closed", pk, status="lost"))
    reverses_what_remains_not_known(m)
    assert m.state(pk) == "reversed"
    # the checker without a downstream's record counts both (that of what remains carried 0)
    assert from_marks(ledger_marks(m.redis, [pk]))[pk].keys == 1 + per_refund
    m.teardown()


@pytest.mark.parametrize("per_refund", [False, True])
def test_a_thin_paid_payments_amount_known_after_its_reversal_of_what_remains_was_due(
    protocol_redis: RedisServer, per_refund: bool
) -> None:
    """Paid only by its thin event, fulfilled, a dispute closed lost: its reversal of what
    remains is due with its amount not known (None). The PaymentIntent's own paid event then
    comes late and gives the payment its amount, before the reversal is called, and after it
    is done: the call still carries None (its amount was fixed when it became due), and the
    reversal done stays one recorded effect, whatever the payment's amount says now."""
    m, pk = fulfilled_by_its_thin_event(protocol_redis, per_refund)
    if per_refund:
        m.deliver(m.pool_event("refund.created", pk))
        m.worker_fulfils_the_next_job()
        assert m.state(pk) == "fulfilled"
    m.deliver(m.pool_event("charge.dispute.closed", pk, status="lost"))
    m.deliver(m.pool_event(PAYING, pk))  # late: the amount is known from now on
    assert pk in m.amounts
    reverses_what_remains_not_known(m)
    assert m.state(pk) == "reversed"
    m.one_effect_per_payment()
    m.teardown()


def reversed_refund_by_refund_amount_not_known(server: RedisServer) -> tuple[Protocol, str]:
    """A payment paid only by its thin event, fulfilled, refunded in full in two refunds, each
    reversed on its own (REVERSAL_PER_REFUND) while the amount paid was not known: fulfilled
    after each, as its amount cannot say it is taken back in full."""
    m, pk = fulfilled_by_its_thin_event(server, per_refund=True)
    created = m.pool_events("refund.created", pk)
    assert len(created) == 2  # the two refunds that make the whole amount
    for refund in created:
        m.deliver(refund)
        m.worker_fulfils_the_next_job()
        assert m.state(pk) == "fulfilled"
    assert m.redis.hget(keys.payment(pk), "amount") == b""
    assert pk not in m.told_in_full  # neither call carried the amount paid
    return m, pk


@pytest.mark.parametrize("by", ["snapshot", "intent_read"])
def test_a_thin_paid_payment_reversed_refund_by_refund_then_its_amount_known_reverses_the_rest(
    protocol_redis: RedisServer, by: str
) -> None:
    """Refunds reversed one by one while the amount paid was not known; then the
    PaymentIntent's own paid event (or a worker's read of it, landing late) gives the amount:
    taken back in full with every refund reversed, and no call said so (each carried no
    amount paid). One more reversal, of what remains (0, refund id null, its key
    ``reverse:{payment_key}``) is due; its call carries the amount paid, and once it is done
    the payment is ``reversed``: never ``reversed`` at once, with no call to say so."""
    m, pk = reversed_refund_by_refund_amount_not_known(protocol_redis)
    if by == "snapshot":
        m.deliver(m.pool_event(PAYING, pk))
    else:
        thin = [i for i, (e, _) in enumerate(m.events) if e["type"] == THIN_PAYING]
        index = next(n for n, i in enumerate(thin) if m.events[i][0]["related_object"]["id"] == pk)
        m.worker_reads_a_thin_payments_intent(index, refund_first=False, stale=True)
    assert pk in m.amounts
    assert (m.state(pk), m.leg(pk), m.reversal_refund(pk)) == ("queued", "reverse", "")
    m.worker_takes_a_job()
    worker = m.workers[0]
    assert worker is not None and worker.leg == "reverse"
    assert (worker.refund, worker.amount, worker.paid) == ("", 0, m.amounts[pk])
    m.worker_fences(0)
    m.worker_calls(0, "ok", True)
    m.worker_finishes(0)
    assert m.state(pk) == "reversed" and pk in m.told_in_full
    fields = m.redis.hmget(keys.payment(pk), "rest_reversed", "reversed_amount")
    assert fields == [b"1", str(m.amounts[pk]).encode()]
    # three keys: each refund's and that of what remains
    assert from_marks(ledger_marks(m.redis, [pk]))[pk].keys == 3
    m.teardown()


@pytest.mark.parametrize("comes", ["before_its_start", "after_its_start", "after_its_call"])
def test_a_thin_paid_payments_amount_coming_during_its_last_refunds_reversal(
    protocol_redis: RedisServer, comes: str
) -> None:
    """Paid only by its thin event, fulfilled, its first refund reversed on its own with the
    amount paid not known; the second refund (the rest) is due when the PaymentIntent's
    paid event gives the amount: before that reversal's attempt starts, its call carries
    the amount and says it reaches it (``reversed``, no other reversal); after it started
    (its call carries none, or made it already), what remains (0, refund id null) is
    reversed once more before the payment is ``reversed``."""
    m, pk = fulfilled_by_its_thin_event(protocol_redis, per_refund=True)
    first, rest = m.pool_events("refund.created", pk)
    m.deliver(first)
    m.worker_fulfils_the_next_job()
    m.deliver(rest)
    paying = m.pool_event(PAYING, pk)
    if comes == "before_its_start":
        m.deliver(paying)
    m.worker_takes_a_job()
    worker = m.workers[0]
    assert worker is not None and worker.leg == "reverse" and worker.refund
    if comes == "after_its_start":
        m.deliver(paying)
    m.worker_fences(0)
    m.worker_calls(0, "ok", True)
    if comes == "after_its_call":
        m.deliver(paying)
    m.worker_finishes(0)
    if comes == "before_its_start":
        assert worker.paid == m.amounts[pk]
        assert m.state(pk) == "reversed" and pk in m.told_in_full
        assert m.redis.hget(keys.payment(pk), "rest_reversed") is None
    else:
        assert worker.paid is None and pk not in m.told_in_full
        assert (m.state(pk), m.leg(pk), m.reversal_refund(pk)) == ("queued", "reverse", "")
        m.sweeper_runs()  # the next reversal's job
        m.worker_takes_a_job()
        worker = m.workers[0]
        assert worker is not None and (worker.refund, worker.amount) == ("", 0)
        m.worker_fences(0)
        m.worker_calls(0, "ok", True)
        m.worker_finishes(0)
        assert m.state(pk) == "reversed" and pk in m.told_in_full
        assert m.redis.hget(keys.payment(pk), "rest_reversed") == b"1"
    assert not m.redis.hexists(keys.payment(pk), "reversal_paid_unknown")
    m.teardown()


@pytest.mark.parametrize("outcome", ["ambiguous", "permanent"])
def test_the_reversal_of_what_remains_after_refund_by_refund_waits_like_any(
    protocol_redis: RedisServer, outcome: str
) -> None:
    """That reversal of what remains, by an action that is not replay-safe, cut off in its
    call (interrupted) or refused for good (failed): it waits for a person as every
    reversal does; the person resolves it (found applied) or retries it (its call again,
    applied): ``reversed``."""
    m, pk = reversed_refund_by_refund_amount_not_known(protocol_redis)
    m.deliver(m.pool_event(PAYING, pk))
    m.worker_runs_a_whole_job(outcome, True)
    waits = "interrupted" if outcome == "ambiguous" else "failed"
    assert (m.state(pk), m.leg(pk)) == (waits, "reverse")
    m.person_decides(0, "fulfilled" if outcome == "ambiguous" else "requeue")
    if outcome == "permanent":  # the person's retry: its call again, applied
        m.worker_fulfils_the_next_job()
    assert m.state(pk) == "reversed"
    assert m.redis.hget(keys.payment(pk), "rest_reversed") == b"1"
    m.teardown()
