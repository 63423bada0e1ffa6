"""The explorer's machine driven by hand: a built-in action's settlement of a payment taken
back after a call that may have applied (its key found, or voided)."""

import pytest

from tests.support.processes import RedisServer
from tests.support.protocol.by_hand import settling_machine, unpaid_with_takings
from tests.support.protocol.constants import LEASE_MS
from tests.support.protocol.machine import Protocol
from tests.support.protocol.worker import Worker


def settlement_begun(m: Protocol, applied: bool) -> str:
    """Run the rule taken_back_after_an_answer_never_came (its call applied or not) until a
    payment's settlement is due; that payment's key."""
    for index in range(100):
        m.taken_back_after_an_answer_never_came(index, applied, all_events=True)
        begun = [pk for pk in m.all_payments() if m.leg(pk) == "settle"]
        if begun:
            return begun[0]
    raise AssertionError("no payment of the pool was paid, called and taken back")


@pytest.mark.parametrize("applied", [True, False])
@pytest.mark.parametrize("reverse", [True, False])
def test_a_payment_taken_back_after_an_answer_never_came_is_settled(
    protocol_redis: RedisServer, applied: bool, reverse: bool
) -> None:
    """The settlement rule by hand: a built-in action's call that may have applied, then a
    full refund; the settlement finds the effect (fulfilled, then reversed when a reversal is
    on) or voids the key (refunded_unfulfilled), and a stalled worker of the first attempt
    that calls after the void applies nothing."""
    m = settling_machine(protocol_redis, reverse=reverse)
    pk = settlement_begun(m, applied)
    assert m.applied[pk] == int(applied)
    stalled = m.workers.index(None)  # the first attempt's worker, alive after all
    m.workers[stalled] = Worker(pk, m.current_token(pk), "fulfil", True, m.real)
    m.worker_runs_a_whole_job("ok", True)  # the settlement
    if applied:
        assert m.state(pk) == ("queued" if reverse else "fulfilled")
        assert m.leg(pk) == ("reverse" if reverse else "fulfil")
    else:
        assert m.state(pk) == "refunded_unfulfilled" and pk in m.voided
        m.worker_calls(stalled, "ok", True)
        assert m.applied[pk] == 0, "an effect under a voided key"
    m.teardown()
    assert m.applied[pk] == int(applied)
    ended = {(True, True): "reversed", (True, False): "fulfilled"}
    assert m.state(pk) == ended.get((applied, reverse), "refunded_unfulfilled")


def test_a_payment_whose_worker_died_after_its_start_is_settled_when_taken_back(
    protocol_redis: RedisServer,
) -> None:
    """A replay-safe attempt may call from its start (no fence of its own): its worker dying
    before it said anything leaves a call that may have applied, so a full refund after its
    lease expired is settled as after a call with no answer (the key voided here: no call
    applied it)."""
    m = settling_machine(protocol_redis)
    for index, pk, taking in unpaid_with_takings(m):
        m.deliver(index)
        m.worker_takes_a_job()
        assert m.workers[0] is not None and m.workers[0].payment == pk
        m.worker_dies(0)
        m.time_passes(LEASE_MS + 1)
        m.sweeper_runs()  # its lease expired: retried
        for i in taking:
            m.deliver(i)
        if m.leg(pk) == "settle":
            break
    assert m.leg(pk) == "settle", "no payment of the pool was paid, started and taken back"
    assert m.calls[pk] == 0
    m.worker_runs_a_whole_job("ok", True)  # the settlement
    assert m.state(pk) == "refunded_unfulfilled" and pk in m.voided
    m.teardown()


@pytest.mark.parametrize("leg", ["fulfil", "settle"])
def test_an_attempt_without_a_call_keeps_what_the_call_before_it_said(
    protocol_redis: RedisServer, leg: str
) -> None:
    """A built-in action's call applies and its answer never comes; a worker that cannot load
    its action takes the next job (the retry, or the settlement once refunded in full) and
    fails it without a call. Refunded in full, the payment is still settled: the settlement
    finds the effect, never refunded_unfulfilled over it."""
    m = settling_machine(protocol_redis, reverse=True)
    for index, pk, taking in unpaid_with_takings(m):
        m.deliver(index)
        m.worker_takes_a_job()
        m.worker_calls(0, "ambiguous", True)  # it applied; no answer came
        m.worker_finishes(0)
        if leg == "fulfil":  # its retry, by a worker that cannot load its action
            m.time_passes(LEASE_MS + 1)
            m.sweeper_runs()
            m.worker_cannot_load_its_action()
            assert m.state(pk) in ("failed", "retrying")
        for i in taking:
            m.deliver(i)
        if m.taken_back(pk):
            break
    assert m.taken_back(pk), "no payment of the pool was paid, called and taken back"
    assert (m.state(pk), m.leg(pk)) == ("queued", "settle"), "not settled: an effect hidden"
    if leg == "settle":  # its settlement, by a worker that cannot load its action: held
        m.worker_cannot_load_its_action()
        assert m.state(pk) == "held"
        assert m.attempts.record_decision(pk, "retry", ("held",), "person")[0] == "ok"
        m.person_acted.add(pk)
        m.worker_runs_a_whole_job("ok", True)  # its fulfilment job: settled again
        assert m.leg(pk) == "settle"
        m.sweeper_runs()  # the settlement's job
    m.worker_runs_a_whole_job("ok", True)  # the settlement: the effect found
    assert (m.state(pk), m.leg(pk)) == ("queued", "reverse")
    m.teardown()
    assert m.state(pk) == "reversed"


def test_a_payment_taken_back_during_its_last_attempt_is_settled_when_its_lease_expires(
    protocol_redis: RedisServer,
) -> None:
    """Each attempt's worker dies until the last attempt of the budget, during which the
    payment is refunded in full: the sweeper ends that lease and the payment is settled
    (no call applied: its key voided), not left failed as a dead letter."""
    m = settling_machine(protocol_redis)
    for index, pk, taking in unpaid_with_takings(m):
        m.deliver(index)
        for attempt in range(m.settings.MAX_ATTEMPTS):
            for _ in range(2):  # the lease before ended, then the retry's job enqueued
                m.time_passes(LEASE_MS + 1)
                m.sweeper_runs()
            m.worker_takes_a_job()
            assert m.workers[0] is not None and m.workers[0].payment == pk, attempt
            m.worker_dies(0)
        for i in taking:
            m.deliver(i)
        if m.taken_back(pk):
            break
    assert m.taken_back(pk), "no payment of the pool was paid, started and taken back"
    assert m.state(pk) == "in_progress"  # nothing until its attempt ends
    m.time_passes(LEASE_MS + 1)
    m.sweeper_runs()  # the last attempt's lease ended: its budget spent
    m.taken_back_is_never_a_dead_letter()
    assert (m.state(pk), m.leg(pk)) == ("queued", "settle")
    m.worker_runs_a_whole_job("ok", True)  # the settlement: no call applied, key voided
    assert m.state(pk) == "refunded_unfulfilled" and pk in m.voided
    m.teardown()


def test_a_late_void_of_a_settlement_is_not_a_lost_success(protocol_redis: RedisServer) -> None:
    """A settlement's worker voids the key and stalls past its lease before it says so: its
    word comes late (stale, the payment retrying), and the next settlement finds the key
    voided. The explorer's late-success rule takes that for a success lost; it is not."""
    m = settling_machine(protocol_redis)
    pk = settlement_begun(m, applied=False)
    m.worker_takes_a_job()  # the settlement
    slot = next(i for i, w in enumerate(m.workers) if w and w.payment == pk)
    m.late_success_after_a_person_retried(slot, deferred=False)
    assert pk in m.voided and m.state(pk) == "retrying"
    m.teardown()
    assert m.state(pk) == "refunded_unfulfilled"
