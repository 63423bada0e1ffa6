"""The fulfilment job and the sweeper in this process (RQ's SimpleWorker in burst mode, direct
sweeps): one effect per payment whatever arrives, and each downstream answer recorded for
what it is. Where a process dies or stalls, see tests/system/."""

import itertools
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from redis import Redis

from ledger import keys
from ledger.downstream import read_downstream
from ledger.read import payments as read_payments
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import payment_key_of, run_cli, settled_as
from tests.support.inprocess import Fulfilment
from tests.support.processes import free_port, wait_until


def pay(f: Fulfilment, rng: random.Random) -> str:
    """One paid event recorded; its payment key."""
    event = samples.payment_events(rng)[2]
    assert f.deliver(event).enqueued
    return payment_key_of(event)


def work_until(f: Fulfilment, redis: Redis, pk: str, state: str) -> None:
    """Run the queued jobs, and sweep what comes due, until ``pk`` settles in ``state``."""

    def step() -> bool:
        f.work()
        f.sweep()
        return settled_as(redis, pk, state)

    wait_until(step, what=state)


def test_every_order_of_all_paid_events_fulfils_once(fulfilment, redis, rng) -> None:
    f = fulfilment()
    payments = []
    for order in itertools.permutations(range(3)):
        events = samples.payment_events(rng, checkout=True)
        paid = [e for e in events if e["type"] in samples.PAID_TYPES]
        for index in order:
            for _ in range(3):
                f.deliver(paid[index])
        payments.append(payment_key_of(events[0]))
    assert redis.llen("rq:queue:fulfilment") == len(payments) == 6
    f.work()
    down = read_downstream(str(f.settings.sqlite_downstream))
    assert down["totals"] == {"calls": 6, "effects": 6}
    for pk in payments:
        assert down["payments"][pk] == {
            "calls": 1,
            "applied": 1,
            "already_applied": 0,
            "effects": 1,
        }
        record = read_payments.payment(redis, pk)
        assert record is not None and record.state == "fulfilled"
        assert record.attempts_started == 1 and len(record.events) == 3
        assert record.receipt is not None and record.receipt["outcome"] == "applied"


def test_fifty_concurrent_copies_one_job_one_call_one_effect(fulfilment, redis, rng) -> None:
    f = fulfilment()
    event = samples.payment_events(rng)[2]
    with ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(lambda _: f.deliver(event), range(50)))
    assert sum(a.enqueued for a in answers) == 1 and redis.llen("rq:queue:fulfilment") == 1
    f.work()
    down = read_downstream(str(f.settings.sqlite_downstream))
    assert down["payments"][payment_key_of(event)]["calls"] == 1
    assert down["totals"]["effects"] == 1


def test_transient_failures_retry_then_fulfil(fulfilment, redis, rng) -> None:
    """A replay-safe downstream's 500s are retried with the same key."""
    with CountingDownstream(script=[500, 500]) as downstream:
        f = fulfilment(FULFILMENT_ACTION=downstream.url, FULFILMENT_REPLAY_SAFE="true")
        pk = pay(f, rng)
        work_until(f, redis, pk, "fulfilled")
        record = read_payments.payment(redis, pk)
        assert record is not None and record.attempts_started == 3
        outcomes = [a.outcome for a in record.attempts]
        assert outcomes == ["retry", "retry", "fulfilled"]
        assert downstream.calls[pk] == 3


def test_always_failing_downstream_dead_letters_then_retry_recovers(fulfilment, redis, rng) -> None:
    with CountingDownstream(default=500) as downstream:
        f = fulfilment(
            FULFILMENT_ACTION=downstream.url, MAX_ATTEMPTS="3", FULFILMENT_REPLAY_SAFE="true"
        )
        pk = pay(f, rng)
        work_until(f, redis, pk, "failed")
        record = read_payments.payment(redis, pk)
        assert record is not None and (record.last_error or "").startswith("http 500")
        assert downstream.calls[pk] == 3
        downstream.default = 200
        assert run_cli({}, "retry", pk).exit_code == 0
        work_until(f, redis, pk, "fulfilled")
        assert downstream.calls[pk] == 4
        assert run_cli({}, "retry", pk).exit_code == 1  # fulfilled: nothing to retry


@pytest.mark.parametrize("replay_safe", [True, False])
def test_slow_downstream(replay_safe: bool, fulfilment, redis, rng) -> None:
    """The first call outlasts FULFILMENT_TIMEOUT: it may have been applied."""
    with CountingDownstream(delays=[2.0]) as downstream:
        f = fulfilment(
            FULFILMENT_ACTION=downstream.url,
            FULFILMENT_TIMEOUT="0.5",
            FULFILMENT_REPLAY_SAFE=str(replay_safe).lower(),
        )
        pk = pay(f, rng)
        work_until(f, redis, pk, "fulfilled" if replay_safe else "interrupted")
        assert downstream.calls[pk] == (2 if replay_safe else 1)
        record = read_payments.payment(redis, pk)
        assert record is not None
        first = record.attempts[0].error or ""
        assert "ReadTimeout" in first or "deadline" in first  # whichever of the two fired first


def test_a_500_from_a_downstream_not_replay_safe_waits_for_a_person(fulfilment, redis, rng) -> None:
    """A handler may fail after its commit: the 500 does not say nothing was applied, so a
    call that may not run twice is not run again (before: retried, a second effect)."""
    with CountingDownstream(script=[500]) as downstream:
        f = fulfilment(FULFILMENT_ACTION=downstream.url)
        pk = pay(f, rng)
        work_until(f, redis, pk, "interrupted")
        assert downstream.calls[pk] == 1
        record = read_payments.payment(redis, pk)
        assert record is not None and (record.last_error or "").startswith("http 500")
        assert redis.hget(keys.BREAKER, "failures") in (None, b"0")  # it answered: up


@pytest.mark.parametrize("replay_safe", [True, False])
def test_a_409_is_a_key_in_use_asked_again_never_done(
    replay_safe: bool, fulfilment, redis, rng
) -> None:
    """409: a request with this Idempotency-Key is still in progress (Stripe's answer, the
    IETF draft's): not applied yet, and it may yet fail. Before, it counted as done: a
    payment `fulfilled` with no effect when that first request then failed."""
    with CountingDownstream(script=[409]) as downstream:
        f = fulfilment(
            FULFILMENT_ACTION=downstream.url, FULFILMENT_REPLAY_SAFE=str(replay_safe).lower()
        )
        pk = pay(f, rng)
        work_until(f, redis, pk, "fulfilled")
        record = read_payments.payment(redis, pk)
        assert record is not None and [a.outcome for a in record.attempts] == ["retry", "fulfilled"]
        assert "Idempotency-Key is in use" in (record.attempts[0].error or "")
        assert getattr(record, "receipt", {})["status"] == 200
        assert downstream.calls[pk] == 2


def test_a_downstream_answering_409_for_a_key_it_applied_fails_saying_what_to_answer(
    fulfilment, redis, rng
) -> None:
    """A downstream that answers 409 for a key it already applied (what this service once
    asked for) ends `failed`, its error saying to answer such a key with its stored 2xx."""
    with CountingDownstream(default=409) as downstream:
        f = fulfilment(
            FULFILMENT_ACTION=downstream.url, FULFILMENT_REPLAY_SAFE="true", MAX_ATTEMPTS="2"
        )
        pk = pay(f, rng)
        work_until(f, redis, pk, "failed")
        record = read_payments.payment(redis, pk)
        assert record is not None and downstream.calls[pk] == 2
        assert "a key already applied is answered with its stored 2xx" in (record.last_error or "")


def test_a_501_from_a_downstream_not_replay_safe_is_asked_again(fulfilment, redis, rng) -> None:
    """No handler ran (the method not served, as a proxy in front may answer): nothing was
    applied, so it is retried, unlike a 500."""
    with CountingDownstream(script=[501]) as downstream:
        f = fulfilment(FULFILMENT_ACTION=downstream.url)
        pk = pay(f, rng)
        work_until(f, redis, pk, "fulfilled")
        assert downstream.calls[pk] == 2


def test_downstream_refusing_connections_waits_without_spending_attempts(
    fulfilment, redis, rng
) -> None:
    """Nothing listens: the request never left, so it is retried (even by a non-replay-safe
    action) without spending the attempt budget while no one is answered. One payment alone
    is one witness however often (it never opens the breaker: its code may say so of
    itself); three payments' are three, and the breaker opens and they wait."""
    url = f"http://127.0.0.1:{free_port()}/fulfil"
    f = fulfilment(FULFILMENT_ACTION=url, MAX_ATTEMPTS="2", BREAKER_THRESHOLD="3")
    alone = pay(f, rng)

    def tried(times: int) -> bool:
        f.work()
        f.sweep()
        record = read_payments.payment(redis, alone)
        return record is not None and record.attempts_started >= times

    wait_until(lambda: tried(4), what="four attempts of the payment alone")
    record = read_payments.payment(redis, alone)
    # MAX_ATTEMPTS 2, none spent: waiting to be tried again (queued by the sweeper, or not yet)
    assert record is not None and record.state in ("queued", "retrying"), record.state
    assert "ConnectionError" in (record.last_error or "")
    assert redis.hget(keys.BREAKER, "state") != b"open"
    assert redis.hget(keys.BREAKER, "failures") == b"1"
    others = [pay(f, rng), pay(f, rng)]

    def step() -> bool:
        f.work()
        f.sweep()
        return any(redis.hget(keys.payment(pk), "waiting") == b"breaker" for pk in others)

    wait_until(step, what="waiting for the breaker")
    assert redis.hget(keys.BREAKER, "state") == b"open"
    for pk in (alone, *others):
        record = read_payments.payment(redis, pk)
        assert record is not None and record.state in ("queued", "retrying"), (pk, record.state)
        # every one refunded: only the latest keeps its record, so an outage cannot grow it
        assert len(record.attempts) == 1
        refunds = redis.hget(keys.payment(pk), "refunds")
        assert refunds is not None and int(refunds) == record.attempts_started, pk


def test_gateway_error_is_ambiguous_for_a_non_replay_safe_action(fulfilment, redis, rng) -> None:
    with CountingDownstream(default=502) as downstream:
        f = fulfilment(FULFILMENT_ACTION=downstream.url)
        pk = pay(f, rng)
        f.work()
        assert settled_as(redis, pk, "interrupted")
        f.sweep()
        f.work()
        assert downstream.calls[pk] == 1  # nothing may call it again


def test_an_action_that_cannot_be_loaded_fails_the_payment_with_its_error(
    fulfilment, redis, rng
) -> None:
    f = fulfilment(FULFILMENT_ACTION="foo_not_a_module:fulfil")
    pk = pay(f, rng)
    f.work()
    assert settled_as(redis, pk, "failed")
    record = read_payments.payment(redis, pk)
    assert record is not None and "could not be loaded" in (record.last_error or "")
    assert "foo" in (record.last_error or "")
    assert pk in [p.payment_key for p in read_payments.payments(redis, read_payments.ATTENTION)]


def test_a_payment_queued_too_long_needs_a_person(fulfilment, redis, rng) -> None:
    pk = pay(fulfilment(), rng)
    assert read_payments.payments(redis, read_payments.ATTENTION, stuck_after_s=3600) == []
    wait_until(
        lambda: read_payments.payments(redis, read_payments.ATTENTION, stuck_after_s=0),
        what="listed",
    )
    assert (
        read_payments.payments(redis, read_payments.ATTENTION, stuck_after_s=0)[0].payment_key == pk
    )


CAPABILITY_PATH = "/hooks/T0000/B0000/PATHSECRET;jsessionid=SESSION789?token=SECRET123#x"
"""A capability URL's secrets: in the path, in ;params and in the query."""


def test_errors_name_the_downstream_by_origin_only(fulfilment, redis, rng) -> None:
    """Refused (404, permanent) and unreachable (connection refused: retried, never counted,
    so it waits rather than fails): the stored errors say scheme, host and port, the error's
    class or status (and the answer's body), nothing of the path."""
    with CountingDownstream(default=404) as downstream:
        origin = downstream.url.removesuffix("/fulfil")
        f = fulfilment(FULFILMENT_ACTION=origin + CAPABILITY_PATH)
        pk = pay(f, rng)
        work_until(f, redis, pk, "failed")
        record = read_payments.payment(redis, pk)
        said = '{"order": "ord_1"}'  # its body, after the status: the downstream's words
        assert record is not None and record.last_error == f"http 404 from {origin}: {said}"
    port = free_port()
    f = fulfilment(FULFILMENT_ACTION=f"http://127.0.0.1:{port}{CAPABILITY_PATH}", MAX_ATTEMPTS="1")
    pk = pay(f, rng)

    def step() -> bool:
        f.work()
        f.sweep()
        return redis.hget(keys.payment(pk), "last_error") is not None

    wait_until(step, what="the refused call's error stored")
    unreachable = read_payments.payment(redis, pk)
    assert unreachable is not None
    assert unreachable.last_error == (
        f"http: ConnectionError (Connection refused) calling http://127.0.0.1:{port}"
    )
    stored = b" ".join(redis.hgetall(keys.payment(pk)).values()).decode()
    for secret in ("PATHSECRET", "SESSION789", "SECRET123", "/hooks"):
        assert secret not in stored
