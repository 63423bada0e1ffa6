"""A Checkout purchase's line items (CHECKOUT_LINE_ITEMS): read from Stripe's API (the local
stand-in) by real RQ workers once per payment, every page of them, kept and given to every
attempt; while Stripe's API answers 429 or 500 the payment waits without spending an
attempt or touching the downstream's breaker; a key Stripe refuses is named at start-up and
on the payment."""

import subprocess
from pathlib import Path

import pytest
from redis import Redis

from ledger import keys
from ledger.read import payments
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import payment_key_of, state_of
from tests.support.processes import wait_until
from tests.support.purchases import checkout_purchase, line_items, purchase_validator
from tests.support.stripe_api import API_KEY, EventsApi, stripe_shown

ROOT = Path(__file__).resolve().parents[2]


def checkout(stripe_api: EventsApi, rng, count: int) -> tuple[list[dict], str, str]:
    """A Checkout purchase whose session Stripe's API serves with ``count`` line items."""
    events = checkout_purchase(rng)
    session = events[3]["data"]["object"]
    stripe_api.add_session(session, line_items(count, session["id"]))
    return events, payment_key_of(events[2]), f"/v1/checkout/sessions/{session['id']}/line_items"


def with_line_items(stripe_api: EventsApi, **extra: str) -> dict[str, str]:
    return {
        "CHECKOUT_LINE_ITEMS": "true",
        "STRIPE_API_KEY": API_KEY,
        "STRIPE_API_BASE": stripe_api.url,
        **extra,
    }


def test_every_page_read_once_and_given_to_every_attempt(stack, redis: Redis, rng, stripe_api):
    events, pk, path = checkout(stripe_api, rng, 250)  # three pages of at most 100
    with CountingDownstream(script=[500]) as downstream:  # the first attempt fails: a retry
        s = stack(
            FULFILMENT_ACTION=downstream.url,
            FULFILMENT_REPLAY_SAFE="true",
            **with_line_items(stripe_api),
        )
        s.start_web()
        for event in (events[3], *events[:3]):
            assert s.send(samples.encode(event)).status_code == 200
        s.start_worker()
        s.start_worker()
        s.start_sweeper()
        wait_until(lambda: state_of(redis, pk) == "fulfilled", what="fulfilled")
    assert stripe_api.checkout_requests[path] == 3
    first, second = downstream.bodies
    assert first["line_items"] == second["line_items"] and (first["token"], second["token"]) == (
        1,
        2,
    )
    items = first["line_items"]
    assert len(items) == 250 and purchase_validator().is_valid(first)
    assert items[7] == {
        "id": f"li_{first['checkout_session']['id'][-8:]}000007",
        "price": "price_0000000007",
        "product": "prod_0000000007",
        "quantity": 2,
        "unit_amount": 500,
        "amount_total": 1000,
        "currency": "usd",
        "description": "Sticker #7",
        "amount_subtotal": 1000,
        "amount_discount": 0,
        "amount_tax": 0,
        "price_lookup_key": "sticker_1",
        "price_metadata": {"credits": "20"},
    }


@pytest.mark.parametrize(("status", "seconds"), [(429, 10), (500, 3)])
def test_stripe_refusing_for_a_while_makes_the_payment_wait(
    stack, redis: Redis, rng, stripe_api, status: int, seconds: float
) -> None:
    events, pk, path = checkout(stripe_api, rng, 3)
    stripe_api.fail_for(status, seconds)
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url, **with_line_items(stripe_api))
        s.start_web()
        for event in (events[3], *events[:3]):
            assert s.send(samples.encode(event)).status_code == 200
        s.start_worker()
        s.start_sweeper()
        wait_until(lambda: state_of(redis, pk) == "fulfilled", timeout=60, what="fulfilled")
    assert downstream.calls[pk] == 1 and len(downstream.bodies[0]["line_items"]) == 3
    assert redis.hget(keys.payment(pk), "token") == b"1"  # no attempt spent on the waits
    assert redis.hget(keys.BREAKER, "opens") is None and not redis.hget(keys.BREAKER, "failures")
    assert stripe_api.checkout_requests[path] >= 2  # refused, then read once
    assert int(redis.hget(keys.STATS, f"deferred:{keys.STRIPE_WAIT}") or 0) >= 1
    record = payments.payment(redis, pk)
    assert record is not None and record.attempts_started == 1
    assert record.last_skip and f" {status} " in record.last_skip, record.last_skip


def test_a_key_stripe_refuses_fails_the_payment_without_a_call(
    stack, redis: Redis, rng, stripe_api
) -> None:
    events, pk, _ = checkout(stripe_api, rng, 3)
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url, **with_line_items(stripe_api))
        s.start_web()
        s.start_worker()  # starts: the key was good then
        wait_until(lambda: stripe_api.checkout_requests["/v1/checkout/sessions"], what="probe")
        stripe_api.forbidden = True
        for event in (events[3], *events[:3]):
            assert s.send(samples.encode(event)).status_code == 200
        wait_until(lambda: state_of(redis, pk) == "failed", what="failed")
    assert not downstream.calls
    error = redis.hget(keys.payment(pk), "last_error").decode()
    assert "Stripe's API refused STRIPE_API_KEY (403)" in error, error
    assert stripe_shown(API_KEY) not in error and "key 'rk_test_***'" in error  # kind only


@pytest.mark.parametrize("reads", ["Checkout Sessions", "PaymentIntents", "Invoices"])
def test_a_worker_refuses_to_start_with_a_key_stripe_refuses(config, stripe_api, reads) -> None:
    """For line items, for a thin-paid payment's PaymentIntent (a thin event may pay), or
    for an invoice's lines (INVOICE_LINES)."""
    stripe_api.forbidden = True
    if reads == "Checkout Sessions":
        given = with_line_items(stripe_api)
    elif reads == "Invoices":
        given = {"INVOICE_LINES": "true", "STRIPE_API_KEY": API_KEY}
        given |= {"STRIPE_API_BASE": stripe_api.url}
    else:
        paid = "payment_intent.succeeded,v1.payment_intent.succeeded"
        given = {"PAID_EVENT_TYPES": paid, "STRIPE_API_KEY": API_KEY}
        given |= {"STRIPE_API_BASE": stripe_api.url}
    env = {
        "PATH": f"{ROOT / '.venv' / 'bin'}:/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "REDIS_URL": str(config["REDIS_URL"]),
        "STRIPE_WEBHOOK_SECRET": "whsec_x",
        **given,
    }
    argv = ["rq", "worker", "-w", "rq.worker.SimpleWorker", "-c", "workers.rq_config", "--burst"]
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith("invalid setting STRIPE_API_KEY=") and "403" in lines[0]
    assert f"for reading {reads}" in lines[0] and API_KEY not in lines[0]
