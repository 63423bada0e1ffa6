"""One purchase, one fulfilment, whatever Stripe sends: ids Stripe ties are one payment in
either arrival order; what cannot be tied for sure, what is not a payment, and what this
deployment must not fulfil (the other mode, Connect) waits for a person, visibly."""

import copy
import itertools
import json
import random
from typing import Any

import pytest
from redis import Redis

from ledger import keys, settings
from ledger.connection import connect
from ledger.decisions import decide
from ledger.deliveries import Delivery, Ledger, Recorded, new_request_id
from ledger.downstream import read_downstream
from ledger.events import classify
from ledger.read import payments, stats
from ledger.read.base import to_builtins
from ledger.read.next_step import next_step
from ledgerctl import samples
from tests.support.helpers import purchase, settled_as, state_of
from tests.support.refunds import refund_events


def ledger_for(url: str, **overrides: object) -> Ledger:
    given = {"REDIS_URL": url, "STRIPE_WEBHOOK_SECRET": "whsec_x", "STRIPE_MODE": "test"}
    s = settings.load({}, **{**given, **overrides})
    return Ledger(connect(s), s)


def record(ledger: Ledger, event: dict[str, Any]) -> Recorded:
    body = samples.encode(event)
    c = classify(event, ledger.settings.policy)
    return ledger.record_delivery(Delivery(event, body, c, 0, "stripe", new_request_id()))


def queued_or_held(redis: Redis) -> dict[str, int]:
    counts = to_builtins(stats.counters(redis).payments_by_state)
    return {s: n for s, n in counts.items() if n}


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_checkout_with_invoice_is_one_payment_in_any_order(
    order: tuple[int, ...],
    redis: Redis,
    redis_server,
    rng,
) -> None:
    ledger = ledger_for(redis_server.url, FULFIL_UNLINKED_INVOICES=True)
    events = purchase(rng)
    answers = [record(ledger, events[i]) for i in order]
    enqueued = [a for a in answers if a.enqueued or a.payment_state == "queued"]
    states = queued_or_held(redis)
    if order[2] == 0:
        # invoice.paid and payment_intent.succeeded first: nothing ties them until the
        # session; the second waits for a person as a possible duplicate, both ids shown.
        assert states == {"queued": 1, "held": 1}, states
        held = payments.payments(redis, "held")[0].hold_reason or ""
        assert "possible duplicate purchase" in held or "same purchase as" in held
        assert answers[0].payment_key in held
    else:
        assert states == {"queued": 1}, states
        assert len({a.payment_key for a in answers}) == 1
    assert sum(1 for a in answers if a.enqueued) <= 1
    assert enqueued


def test_an_expanded_invoice_names_its_payment_intent(redis: Redis, redis_server, rng) -> None:
    ledger = ledger_for(redis_server.url, FULFIL_UNLINKED_INVOICES=True)
    _, invoice, intent = purchase(rng)
    pi = intent["data"]["object"]["id"]
    invoice["data"]["object"]["payments"] = {
        "data": [{"payment": {"type": "payment_intent", "payment_intent": pi}}]
    }
    assert record(ledger, invoice).payment_key == pi
    assert record(ledger, intent).payment_key == pi
    assert queued_or_held(redis) == {"queued": 1}


def test_unlinked_invoices_stay_unpaid_by_default(redis: Redis, redis_server, rng) -> None:
    ledger = ledger_for(redis_server.url)
    session, invoice, intent = purchase(rng)
    for event in (invoice, intent, session):
        record(ledger, event)
    assert queued_or_held(redis) == {"queued": 1, "pending": 1}


@pytest.mark.parametrize(
    ("overrides", "livemode", "account", "reason"),
    [
        ({"STRIPE_MODE": "live"}, False, None, "test-mode event in a live deployment"),
        ({"STRIPE_MODE": "test"}, True, None, "live-mode event in a test deployment"),
        ({}, False, "acct_1Connected", "Connect event of account acct_1Connected"),
    ],
)
def test_events_this_deployment_must_not_fulfil_are_held_visibly(
    overrides: dict,
    livemode: bool,
    account: str | None,
    reason: str,
    redis: Redis,
    redis_server,
    rng,
) -> None:
    ledger = ledger_for(redis_server.url, **overrides)
    event = samples.payment_events(rng)[2]
    event["livemode"] = livemode
    if account:
        event["account"] = account
    first = record(ledger, event)
    again = record(ledger, event)
    assert (first.payment_state, first.enqueued, again.deliveries) == ("held", False, 2)
    attention = payments.payments(redis, payments.ATTENTION)
    assert [p.payment_key for p in attention] == [first.payment_key]
    assert (attention[0].hold_reason or "").startswith(reason)
    assert attention[0].account == (account or None)


def test_connect_events_fulfil_when_allowed(redis: Redis, redis_server, rng) -> None:
    ledger = ledger_for(redis_server.url, FULFIL_CONNECT=True)
    event = samples.payment_events(rng)[2]
    event["account"] = "acct_1Connected"
    answer = record(ledger, event)
    assert (answer.payment_state, answer.enqueued) == ("queued", True)
    assert (
        getattr(payments.payment(redis, answer.payment_key), "account", None) == "acct_1Connected"
    )


def test_same_id_with_another_body_moves_no_payment(redis: Redis, redis_server, rng) -> None:
    """Regression: the copy named another PaymentIntent; the script failed half-way
    (gsub on a missing list) after counting it and creating a pending payment."""
    ledger = ledger_for(redis_server.url)
    event = samples.payment_events(rng)[2]
    record(ledger, event)
    other = copy.deepcopy(event)
    other["data"]["object"]["id"] = samples.random_id(rng, "pi")
    answer = record(ledger, other)
    assert (answer.deliveries, answer.payment_key) == (2, event["data"]["object"]["id"])
    assert queued_or_held(redis) == {"queued": 1}
    assert stats.counters(redis).conflicts == 1


def test_manual_capture_fulfils_on_capture_only(redis: Redis, redis_server, rng) -> None:
    ledger = ledger_for(redis_server.url)
    events = samples.payment_events(rng)
    charge = events[1]
    charge["data"]["object"].update(captured=False, amount_captured=0)
    assert record(ledger, charge).payment_state == "pending"
    captured = json.loads(json.dumps(charge))
    captured.update(id=samples.random_id(rng, "evt"), type="charge.captured")
    captured["data"]["object"].update(captured=True, amount_captured=2000)
    assert record(ledger, captured).enqueued


@pytest.mark.parametrize("unlinked", [True, False], ids=["unlinked-on", "unlinked-off"])
@pytest.mark.parametrize("buyer", ["customer", "guest"])
@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_one_effect_per_purchase_in_every_order_and_worker_timing(
    order: tuple[int, ...], buyer: str, unlinked: bool, fulfilment, redis: Redis, tmp_path
) -> None:
    """Every arrival order of session, invoice.paid and payment_intent.succeeded, with a
    worker fulfilling (or not) after each arrival, counted in the SQLite downstream: one
    effect per purchase. (Before: a guest purchase whose session came last had two effects
    in 10 of these 48 orders and timings with FULFIL_UNLINKED_INVOICES on.)"""
    rng = random.Random(20261203)
    f = fulfilment(FULFIL_UNLINKED_INVOICES=str(unlinked).lower())
    path = f.settings.sqlite_downstream
    assert path is not None
    wrong = {}
    for timing in itertools.product((False, True), repeat=3):
        # One customer per purchase: one buying the same twice is a possible duplicate.
        events = purchase(rng, samples.random_id(rng, "cus"), guest=buyer == "guest")
        before = read_downstream(path)["totals"]["effects"]
        for i, work_now in zip(order, timing, strict=True):
            f.deliver(events[i])
            if work_now:
                f.sweep()  # a job captured for another id is enqueued by the sweeper
                f.work()
        f.sweep()
        f.work()
        effects = read_downstream(path)["totals"]["effects"] - before
        if effects != 1:
            wrong[timing] = effects  # (worked after 1st, 2nd, 3rd arrival): effects
    assert not wrong, wrong
    left = {s: n for s, n in queued_or_held(redis).items() if s in ("queued", "in_progress")}
    assert not left, left


def test_a_guest_payment_is_compared_only_with_records_not_tied_yet(
    redis: Redis, redis_server, rng
) -> None:
    """A guest's PaymentIntent is held when an invoice of the same amount still waits for
    its tie, and not once Stripe has tied that invoice to its own PaymentIntent."""
    ledger = ledger_for(redis_server.url, FULFIL_UNLINKED_INVOICES=True)
    session, invoice, intent = purchase(rng, "cus_a", guest=True)
    record(ledger, invoice)
    assert record(ledger, intent).payment_state == "held"  # might be the invoice's purchase
    record(ledger, session)  # it is: tied, both leave the untied records
    later = purchase(rng, "cus_b", guest=True)
    assert record(ledger, later[2]).payment_state == "queued"  # alone, same amount
    assert record(ledger, later[1]).payment_state == "held"  # untied: might be that one
    other = purchase(rng, "cus_c", guest=True)
    assert record(ledger, other[0]).payment_state == "queued"  # a session names its halves


@pytest.mark.parametrize("by_hand", [False, True], ids=["possible duplicate", "by hand"])
def test_a_tie_adds_to_why_a_record_is_held_and_keeps_what_a_person_must_do(
    redis: Redis, redis_server, rng, by_hand: bool
) -> None:
    """The tie names the twin beside the hold's own reason, not in its place: a possible
    duplicate stays one, and a record held for a person to act by hand keeps saying how."""
    ledger = ledger_for(redis_server.url, FULFIL_UNLINKED_INVOICES=True)
    session, invoice, intent = purchase(rng, "cus_a", guest=True)
    in_key = record(ledger, invoice).payment_key
    pi_key = record(ledger, intent).payment_key
    held = payments.payment(redis, pi_key)
    assert held is not None and held.state == "held"
    reason = held.hold_reason or ""
    assert reason.startswith("possible duplicate purchase of " + in_key)
    if by_hand:  # as hold_reinstated leaves one Stripe gave back
        reason = "Stripe gave it back: grant it by hand"
        redis.hset(keys.payment(pi_key), mapping={"hold_reason": reason, "by_hand": 1})
    again = copy.deepcopy(session)  # another event of the same session ties them again
    again["id"], again["type"] = "evt_again", "checkout.session.async_payment_succeeded"
    for tying in (session, again):
        record(ledger, tying)
        tied = payments.payment(redis, pi_key)
        assert tied is not None and (tied.state, tied.same_purchase_as) == ("held", in_key)
        assert tied.hold_reason == (
            f"{reason}; also the same purchase as {in_key} "
            "(Stripe tied their ids after both were recorded)"
        ), tying["type"]
        assert tied.by_hand == by_hand


def test_two_records_both_held_then_tied_each_name_the_other(
    redis: Redis, redis_server, rng
) -> None:
    """An invoice held as a possible duplicate of another purchase's PaymentIntent, its own
    PaymentIntent held as a possible duplicate of it, then Stripe ties the two: each hold
    reason names its twin. Said nowhere before (found by the explorer), so a person closing
    the invoice was pointed at the other purchase while the ledger kept the twin's effect as
    its own (``effect_of``: the tie first)."""
    ledger = ledger_for(redis_server.url, FULFIL_UNLINKED_INVOICES=True)
    first = purchase(rng, "cus_a", guest=True)
    assert record(ledger, first[2]).payment_state == "queued"
    session, invoice, intent = purchase(rng, "cus_b", guest=True)
    in_key = record(ledger, invoice).payment_key
    pi_key = record(ledger, intent).payment_key
    reasons = {}
    for key in (in_key, pi_key):
        held = payments.payment(redis, key)
        assert held is not None and held.state == "held", key
        reasons[key] = held.hold_reason or ""
    assert reasons[in_key].startswith("possible duplicate purchase of pi_")
    assert reasons[pi_key].startswith("possible duplicate purchase of " + in_key)
    record(ledger, session)
    tie = "(Stripe tied their ids after both were recorded)"
    for key, twin in ((in_key, pi_key), (pi_key, in_key)):
        tied = payments.payment(redis, key)
        assert tied is not None and (tied.state, tied.same_purchase_as) == ("held", twin)
        assert tied.hold_reason == f"{reasons[key]}; also the same purchase as {twin} {tie}"


def test_run_it_now_says_a_twin_with_the_effect_holds_it_again(fulfilment, redis, rng) -> None:
    """A PaymentIntent queued beside its invoice (no fingerprint match), held when Stripe
    ties them while the invoice is fulfilled: the step's retry says what a retry does then
    (held again, no call: start_attempt.lua), and a retry does just that (review s6 #3)."""
    f = fulfilment(FULFIL_UNLINKED_INVOICES="true")
    session, invoice, intent = purchase(rng)
    in_key, pi = invoice["data"]["object"]["id"], intent["data"]["object"]["id"]
    intent["data"]["object"]["amount_received"] = 1999
    f.deliver(invoice)
    f.work()
    assert settled_as(redis, in_key, "fulfilled")
    f.deliver(intent)
    assert state_of(redis, pi) == "queued"
    f.deliver(session)
    p = payments.payment(redis, pi)
    assert p is not None and p.state == "held" and not p.attempts_started
    step = next_step(p, False)
    assert step is not None and step.retry is not None
    assert f"if {in_key} (the same purchase) has no effect" in step.retry
    assert decide(f.attempts, pi, "resolve", "retry", "person").state == "queued"
    f.work()
    assert state_of(redis, pi) == "held"
    again = payments.payment(redis, pi)
    assert again is not None and not again.attempts_started  # no call, ever, while in_key has it


def test_two_records_both_held_then_tied_and_closed_name_the_effect_they_vouch_for(
    config, fulfilment, redis, rng
) -> None:
    """Both records of a purchase held as possible duplicates (the invoice of another
    purchase's, the PaymentIntent of the invoice), tied, then closed one after the other as
    fulfilled without a call: each vouches for the other purchase's effect, never for its
    twin, which has none (each named the other), and a refund in full names that effect's
    key (review s6 #2)."""
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"], FULFIL_UNLINKED_INVOICES="true")
    first = purchase(rng, "cus_a", guest=True)[2]
    other = first["data"]["object"]["id"]
    f.deliver(first)
    f.work()
    assert settled_as(redis, other, "fulfilled")
    session, invoice, intent = purchase(rng, "cus_b", guest=True)
    in_key, pi = invoice["data"]["object"]["id"], intent["data"]["object"]["id"]
    f.deliver(invoice)
    f.deliver(intent)
    f.deliver(session)
    assert state_of(redis, in_key) == "held" and state_of(redis, pi) == "held"
    for pk in (in_key, pi):
        assert decide(f.attempts, pk, "resolve", "fulfilled", "person").state == "fulfilled"
        assert redis.hget(keys.payment(pk), "effect_of") == other.encode(), pk
    for event in refund_events(rng, pi, 2000, 2000):
        f.deliver(event)
    f.work()
    assert state_of(redis, pi) == "held"
    reason = (redis.hget(keys.payment(pi), "hold_reason") or b"").decode()
    assert f"fulfil:{other}" in reason and f"fulfil:{in_key}" not in reason, reason


def test_two_records_closed_each_as_the_other_s_say_no_record_has_the_effect(
    config, fulfilment, redis, rng
) -> None:
    """Tied records held with no other purchase to vouch for (no ``dup_of``), both closed
    by a person without a call: each names the other, and a refund in full holds it saying
    no record is known to have the effect, never pointing at a key with nothing under it."""
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"], FULFIL_UNLINKED_INVOICES="true")
    f.deliver(purchase(rng, "cus_a", guest=True)[2])
    f.work()
    session, invoice, intent = purchase(rng, "cus_b", guest=True)
    in_key, pi = invoice["data"]["object"]["id"], intent["data"]["object"]["id"]
    for event in (invoice, intent, session):
        f.deliver(event)
    redis.hdel(keys.payment(in_key), "dup_of")  # held for another reason than a duplicate
    redis.hdel(keys.payment(pi), "dup_of")
    for pk in (in_key, pi):
        assert decide(f.attempts, pk, "resolve", "fulfilled", "person").state == "fulfilled"
    assert redis.hget(keys.payment(in_key), "effect_of") == pi.encode()
    assert redis.hget(keys.payment(pi), "effect_of") == in_key.encode()
    for event in refund_events(rng, pi, 2000, 2000):
        f.deliver(event)
    f.work()
    assert state_of(redis, pi) == "held"
    reason = (redis.hget(keys.payment(pi), "hold_reason") or b"").decode()
    assert "no record of its purchase is known to have the effect" in reason, reason
    assert "fulfil:" not in reason


def test_a_held_record_tied_to_one_that_failed_or_is_interrupted_names_it(
    fulfilment, redis, rng
) -> None:
    """The invoice failed (its action gave up), its PaymentIntent was then held as its
    possible duplicate, and the session ties them: the hold reason names the twin too, as for
    any twin (it told only of one going or held: a person closing it read only the duplicate,
    and the explorer's PROTOCOL_SEED=8001 found the effect kept under a record it never
    named)."""
    f = fulfilment(
        FULFILMENT_ACTION="tests.support.refusing_actions:refuse", FULFIL_UNLINKED_INVOICES="true"
    )
    session, invoice, intent = purchase(rng)
    in_key, pi = invoice["data"]["object"]["id"], intent["data"]["object"]["id"]
    f.deliver(invoice)
    f.work()
    assert settled_as(redis, in_key, "failed")
    f.deliver(intent)
    assert state_of(redis, pi) == "held"
    f.deliver(session)
    reason = (redis.hget(keys.payment(pi), "hold_reason") or b"").decode()
    assert f"same purchase as {in_key}" in reason, reason
