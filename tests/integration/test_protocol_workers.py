"""The explorer's machine driven by hand: workers that stall after their fence, Redis's clock
stepping, refused calls, late successes, and the breaker through an outage."""

import pytest

from ledger import keys, landing
from ledger.read import payments
from tests.support.processes import RedisServer
from tests.support.protocol.by_hand import machine_by_hand, unpaid_with_takings
from tests.support.protocol.constants import LEASE_MS, TALLY
from tests.support.protocol.machine import Protocol


def taken_by_a_worker(
    server: RedisServer, seed: int, watched: bool = False
) -> tuple[Protocol, str]:
    """A program driven by hand: one paid payment (not replay-safe), its job taken by worker 0
    (``watched``: after the sweeper has watched Redis's clock for a lease)."""
    m = machine_by_hand(server, seed=seed, replay_safe=False)
    if watched:
        m.time_passes(LEASE_MS + 1)
        m.sweeper_runs()
    paid = next(i for i, (e, _) in enumerate(m.events) if e["type"] == "payment_intent.succeeded")
    m.deliver(paid)
    m.worker_takes_a_job()
    worker = m.workers[0]
    assert worker is not None
    return m, worker.payment


def test_a_worker_stalled_after_its_fence_never_calls_after_a_person_retried(
    protocol_redis: RedisServer,
) -> None:
    """Found while modelling the protocol for the explorer (not by it: with the call window
    taken out, 1,600 random programs did not reach it): A fences, stalls past its lease
    (interrupted) and past the in-flight wait; a person runs it again; B calls; A wakes and
    would call too, twice on a downstream that does not dedupe."""
    m, pk = taken_by_a_worker(protocol_redis, seed=1)
    m.worker_fences(0)
    m.time_passes(LEASE_MS + 1)
    m.sweeper_runs()
    assert m.state(pk) == "interrupted"
    m.time_passes(4 * LEASE_MS)  # past the wait for an in-flight call
    m.person_decides(0, "retry")
    m.worker_takes_a_job()
    m.worker_fences(1)
    m.worker_calls(1, "ok", True)
    m.worker_calls(0, "ok", True)  # A wakes: past its window it must not call
    assert m.calls[pk] == 1
    m.worker_finishes(1)
    assert m.state(pk) == "fulfilled"
    m.teardown()


def test_a_forward_step_of_redis_clock_never_lets_a_call_run_twice(
    protocol_redis: RedisServer,
) -> None:
    """A fences; Redis's clock steps a lease ahead while A is within its call's window (its
    own clock). Were the lease ended, a person would run the payment again (A's liveness
    key ends with the lease) and B and A would both call a downstream that does not dedupe.
    The sweeper holds the lease for a lease of its own clock; A calls and finishes."""
    m, pk = taken_by_a_worker(protocol_redis, seed=1, watched=True)
    m.worker_fences(0)
    m.redis_clock_steps(LEASE_MS + 1)
    m.sweeper_runs()
    assert m.state(pk) == "in_progress"
    m.person_decides(0, "retry")  # nothing to decide: the payment is not interrupted
    m.worker_takes_a_job()  # no job to take: none was enqueued again
    assert m.workers[1] is None
    m.worker_calls(0, "ok", True)
    m.worker_finishes(0)
    assert (m.state(pk), m.calls[pk]) == ("fulfilled", 1)
    m.teardown()


def test_a_refused_call_is_retried_without_counting_as_a_second_effect(
    protocol_redis: RedisServer,
) -> None:
    """The explorer's first counterexample (seeds 101 and 202 at 1e77512) was in the test, not
    the protocol: "a non-replay-safe action is never called twice" was wrong as stated. A
    refusal (5xx, 429, connection refused) applied nothing, so the payment is retried by design
    and the second call is its only effect; the invariant is "never called again after a call
    that may have applied" (docs/ARCHITECTURE.md, invariant 1)."""
    m, pk = taken_by_a_worker(protocol_redis, seed=2)
    m.worker_fences(0)
    m.worker_calls(0, "transient", True)  # refused: nothing applied
    m.worker_finishes(0)
    assert m.state(pk) == "retrying"
    m.time_passes(LEASE_MS + 1)
    m.sweeper_runs()
    m.worker_takes_a_job()
    m.worker_fences(0)
    m.worker_calls(0, "ok", True)
    m.worker_finishes(0)
    assert m.state(pk) == "fulfilled"
    assert (m.calls[pk], m.applied[pk], m.again[pk]) == (2, 1, 0)
    m.one_effect_per_payment()
    m.teardown()


def test_an_outage_walked_by_hand_opens_probes_and_closes_the_breaker(
    protocol_redis: RedisServer,
) -> None:
    """The breaker's whole cycle on the model (random programs reach parts of it): two down
    answers open it, a job meanwhile waits without an attempt, a failed probe re-opens it,
    a pause holds the next probe back, the answered probe closes it and the waiting payment
    is fulfilled once."""
    m, pk = taken_by_a_worker(protocol_redis, seed=4)
    m.worker_fences(0)
    m.worker_calls(0, "down", False)
    m.worker_finishes(0)  # 1 of 2: closed, the attempt counted
    m.time_passes(LEASE_MS + 1)
    m.sweeper_runs()
    m.worker_runs_a_whole_job("refused", False)  # 2 of 2: open
    assert m.redis.hget(keys.BREAKER, "state") == b"open"
    m.time_passes(200)  # its retry is due, the cool-down is not over
    m.sweeper_runs()
    m.worker_takes_a_job()
    assert m.redis.hget(keys.payment(pk), "waiting") == b"breaker" and m.workers == [None, None]
    m.time_passes(LEASE_MS + 1)
    m.sweeper_runs()
    m.worker_runs_a_whole_job("down", False)  # the cool-down is over: the probe, failed
    assert int(m.redis.hget(keys.BREAKER, "probes") or 0) == 1
    m.person_pauses_or_resumes(True)
    m.time_passes(2 * (LEASE_MS + 1))  # a failed prober lets one more probe go first
    m.sweeper_runs()
    m.worker_takes_a_job()  # paused: deferred, no attempt
    assert m.redis.hget(keys.payment(pk), "waiting") == b"paused"
    m.person_pauses_or_resumes(False)
    m.sweeper_runs()  # released at once
    m.worker_runs_a_whole_job("ok", True)  # the second probe, answered: closed
    assert m.redis.hget(keys.BREAKER, "state") == b"closed"
    assert m.state(pk) == "fulfilled" and m.applied[pk] == 1
    record = payments.payment(m.redis, pk)
    assert record is not None and record.attempts_started == 4  # 1 counted, 3 refunded
    m.one_effect_per_payment()
    m.teardown()


def test_an_outage_with_its_admissions_and_reports_sent_twice_counts_each_once(
    protocol_redis: RedisServer,
) -> None:
    """The same outage with every reply of the gate and the breaker lost and the command
    sent again (ledger/connection.py retries it): the refused attempt is refunded once
    though two are counted, and the probe admitted again is the same probe, not deferred
    behind its own grant; each second run answers as the first and changes nothing."""
    m, pk = taken_by_a_worker(protocol_redis, seed=4)
    m.worker_fences(0)
    m.worker_calls(0, "down", False)
    m.worker_finishes(0)  # 1 of 2: closed, the attempt counted
    m.time_passes(LEASE_MS + 1)
    m.sweeper_runs()
    m.worker_runs_a_whole_job_sending_twice("refused", False)  # 2 of 2: open, refunded
    assert m.redis.hget(keys.BREAKER, "state") == b"open"
    assert m.redis.hmget(keys.payment(pk), "token", "budget_base") == [b"2", b"1"]
    m.time_passes(2 * (LEASE_MS + 1))
    m.sweeper_runs()
    m.worker_runs_a_whole_job_sending_twice("ok", True)  # the probe, answered: closed
    assert m.redis.hget(keys.BREAKER, "probes") == b"1"
    assert m.redis.hget(keys.BREAKER, "state") == b"closed"
    assert m.state(pk) == "fulfilled" and m.applied[pk] == 1
    m.one_effect_per_payment()
    m.teardown()


@pytest.mark.parametrize("deferred", [True, False])
def test_a_late_success_after_a_person_retried_is_kept(
    protocol_redis: RedisServer, deferred: bool
) -> None:
    """Regression: finish_attempt took a late receipt only in interrupted or queued. A
    person's resolve --retry re-queued the payment, the gate deferred its job while paused
    (retrying, no new token), the stalled worker's success then arrived and was refused as
    stale, and after the resume the payment was called again: two effects."""
    m, pk = taken_by_a_worker(protocol_redis, seed=5)
    m.late_success_after_a_person_retried(0, deferred)
    assert (
        m.person_acted == {pk} and m.redis.hget(keys.payment(pk), "resolved_from") == b"interrupted"
    )
    assert m.state(pk) == "fulfilled" and m.calls[pk] == 1
    assert m.redis.hget(keys.payment(pk), "waiting") is None
    assert m.redis.zscore(keys.waiting("paused"), pk) is None  # no longer shown as waiting
    m.person_pauses_or_resumes(False)
    m.teardown()  # time, sweeps and workers until every payment ends
    assert m.calls[pk] == 1 and m.applied[pk] == 1


def test_a_late_success_after_its_lease_expired_is_kept(protocol_redis: RedisServer) -> None:
    """The same receipt with no person involved: a replay-safe attempt's lease expires while
    its worker is stalled after its call (retrying, the same token); its success is kept
    rather than refused and the payment called again."""
    m = machine_by_hand(protocol_redis, seed=6, replay_safe=True)
    paid = next(i for i, (e, _) in enumerate(m.events) if e["type"] == "payment_intent.succeeded")
    m.deliver(paid)
    m.worker_takes_a_job()
    worker = m.workers[0]
    assert worker is not None
    m.late_success_after_a_person_retried(0, deferred=False)  # no person: retrying
    assert m.state(worker.payment) == "fulfilled" and not m.person_acted
    m.teardown()
    assert m.calls[worker.payment] == 1


def test_a_late_reversal_receipt_deferred_by_the_gate_leaves_its_waiting_set(
    protocol_redis: RedisServer,
) -> None:
    """Found by the explorer (300 programs, per-refund reversals): a reversal of one refund,
    interrupted, retried by a person and deferred by a pause, then its stalled worker's
    success: the payment went back to fulfilled and stayed in the paused set (its `waiting`
    was dropped before the move that leaves the set)."""
    m = machine_by_hand(protocol_redis, seed=0, replay_safe=False, reverse=True, per_refund=True)
    m.deliver(1)
    m.late_success_after_a_person_retried(0, deferred=False)
    m.stripe_takes_back(0)
    m.late_success_after_a_person_retried(0, deferred=True)
    m.waiting_sets_hold_the_payments_that_wait()
    m.teardown()
    assert TALLY["refund_reversals"] >= 1


@pytest.mark.parametrize("one_customer", [True, False])
def test_one_customers_quota_never_opens_the_breaker_for_the_others(
    protocol_redis: RedisServer, one_customer: bool
) -> None:
    """Found by an outside review: a per-customer quota (429 with Retry-After to every payment
    of one customer) opened the breaker on two of that customer's payments, so every other
    customer's payment waited out the cool-down, and the probe (one of that customer's again,
    corroborated by the others) renewed it. One customer's refusals are one witness; two
    customers' refusals still open it (BREAKER_THRESHOLD 2)."""
    m = machine_by_hand(protocol_redis, seed=5, replay_safe=False, one_customer=one_customer)
    pks = [min(p) for p in m.purchases[:2]]
    for pk in pks:
        m.deliver(m.pool_event("payment_intent.succeeded", pk))
        m.deliver(m.pool_event(landing.SESSION_EVENT, pk))
    assert len({m.party(pk) for pk in pks}) == (1 if one_customer else 2)
    m.worker_runs_a_whole_job("quota", True)
    m.worker_runs_a_whole_job("quota", True)
    assert {m.state(pk) for pk in pks} == {"retrying"}
    state = m.redis.hget(keys.BREAKER, "state") or b"closed"
    assert state == (b"closed" if one_customer else b"open")
    assert int(m.redis.hget(keys.BREAKER, "failures") or 0) == (1 if one_customer else 2)
    m.the_breaker_opens_only_on_evidence_beyond_one_customer()
    m.teardown()


@pytest.mark.parametrize("apart", [True, False])
def test_the_reversal_downstream_down_holds_no_fulfilment_when_apart(
    protocol_redis: RedisServer, apart: bool
) -> None:
    """REVERSAL_ACTION on its own downstream, down (connection refused): its breaker opens,
    the reversal waits behind it, and a new payment is fulfilled at once, the fulfilment
    breaker never told; once that downstream answers, the reversal completes. On the
    fulfilment's own downstream (not apart) the same outage is the fulfilment's: one
    breaker, and the new payment waits behind it."""
    m = machine_by_hand(
        protocol_redis, seed=7, replay_safe=False, reverse=True, threshold=1, reversal_apart=apart
    )
    takings = unpaid_with_takings(m)
    for index, reversed_pk, taking in takings:
        m.deliver(index)
        m.worker_fulfils_the_next_job()
        if m.state(reversed_pk) == "fulfilled":
            m.deliver(taking[0])
            break
    assert m.leg(reversed_pk) == "reverse", "no reversal due"
    m.one_downstream_is_down("reversal", never_sent=True)  # opens its breaker
    held = keys.REVERSAL_BREAKER if apart else keys.FULFILMENT_BREAKER
    assert m.redis.hget(held.state, "state") == b"open"
    index, new_pk, _ = next(takings)
    m.deliver(index)
    m.worker_takes_a_job()  # the new payment's job
    if apart:
        assert not m.redis.exists(keys.BREAKER), "the fulfilment breaker told"
        assert m.workers[0] is not None and m.workers[0].payment == new_pk
        m.worker_fences(0)
        m.worker_calls(0, "ok", True)
        m.worker_finishes(0)
        assert m.state(new_pk) == "fulfilled"
    else:
        assert m.redis.hget(keys.payment(new_pk), "waiting") == b"breaker"
    m.time_passes(200)  # its retry is due, the cool-down is not over
    m.sweeper_runs()
    while m.redis.llen(keys.rq_queue(m.settings.QUEUE_NAME)):
        m.worker_takes_a_job()  # held, no attempt
    assert m.workers == [None, None]
    waits = m.redis.hget(keys.payment(reversed_pk), "waiting")
    assert (m.state(reversed_pk), waits) == ("retrying", held.wait.encode())
    m.an_outage_of_one_downstream_never_opens_the_others_breaker()
    for _ in range(3):  # the cool-down over: its probe is answered, the reversal completes
        m.time_passes(LEASE_MS + 1)
        m.sweeper_runs()
        while m.redis.llen(keys.rq_queue(m.settings.QUEUE_NAME)) and None in m.workers:
            m.worker_fulfils_the_next_job()
    assert m.redis.hget(held.state, "state") == b"closed"
    assert m.state(reversed_pk) in ("reversed", "queued") and m.reversal_calls[reversed_pk] >= 1
    assert m.state(new_pk) == "fulfilled"
    m.teardown()
