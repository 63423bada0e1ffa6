"""An invoice whose event carried only its first lines (``lines.has_more``): with
INVOICE_LINES a real worker reads every line from Stripe's API (the local stand-in) once,
before the first attempt, and every attempt (a reversal's too) gets them all, saying so
(``lines_complete``); while the API does not answer the payment waits without an attempt; a
key Stripe refuses fails it without a call. Without INVOICE_LINES the action is told its
lines are not all of them."""

import random
from typing import Any

from redis import Redis

from ledger import keys, settings
from ledger.stripe_api import key_refused
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import settled_as
from tests.support.inprocess import Fulfilment
from tests.support.processes import wait_until
from tests.support.purchases import invoice_lines, purchase_validator
from tests.support.refunds import refund_events
from tests.support.stripe_api import API_KEY, EventsApi, stripe_shown

CARRIED = 10
"""Lines the invoice's event carries of the stand-in's ``LINES`` (Stripe embeds a first page)."""
LINES = 250
"""Three pages of at most 100."""


def invoice_paid(
    rng: random.Random, stripe_api: EventsApi, has_more: bool = True
) -> tuple[dict[str, Any], str, list[str]]:
    """``invoice.paid`` carrying the first CARRIED of LINES lines the stand-in knows (all of
    them without ``has_more``); the event, its payment key and every line's id."""
    event = samples.event_of_type(rng, "invoice.paid")
    invoice = event["data"]["object"]
    every = invoice_lines(LINES if has_more else CARRIED, invoice["id"])
    stripe_api.add_invoice_lines(invoice["id"], every)
    url = f"/v1/invoices/{invoice['id']}/lines"
    invoice["lines"] = {"object": "list", "data": every[:CARRIED], "has_more": has_more, "url": url}
    return event, invoice["payment_intent"], [x["id"] for x in every]


def reading(stripe_api: EventsApi) -> dict[str, str]:
    return {"INVOICE_LINES": "true", "STRIPE_API_KEY": API_KEY, "STRIPE_API_BASE": stripe_api.url}


def work_until(f: Fulfilment, redis: Redis, pk: str, state: str) -> None:
    wait_until(lambda: (f.work(), f.sweep(), settled_as(redis, pk, state))[2], what=state)


def lines_of(body: dict[str, Any]) -> tuple[list[str], bool]:
    invoice = body["invoice"]
    return [line["id"] for line in invoice["lines"]], invoice["lines_complete"]


def test_every_line_is_read_once_and_given_to_every_attempt(
    fulfilment, redis: Redis, rng, stripe_api: EventsApi
) -> None:
    event, pk, every = invoice_paid(rng, stripe_api)
    with CountingDownstream(script=[500]) as downstream:  # the first attempt fails: a retry
        f = fulfilment(
            FULFILMENT_ACTION=downstream.url, FULFILMENT_REPLAY_SAFE="true", **reading(stripe_api)
        )
        f.deliver(event)
        work_until(f, redis, pk, "fulfilled")
    first, second = downstream.bodies
    assert (first["token"], second["token"]) == (1, 2)
    assert lines_of(first) == lines_of(second) == (every, True)  # each line once, in order
    assert purchase_validator().is_valid(first)
    path = f"/v1/invoices/{first['invoice']['id']}/lines"
    assert stripe_api.checkout_requests[path] == 3  # three pages, read once for both attempts
    period = first["invoice"]["lines"][LINES - 1]
    assert period["metadata"] == {"seat": str(LINES - 1)} and period["price"] == "price_seat000249"


def test_while_the_api_answers_429_the_payment_waits_without_an_attempt(
    fulfilment, redis: Redis, rng, stripe_api: EventsApi
) -> None:
    event, pk, every = invoice_paid(rng, stripe_api)
    stripe_api.fail_for(429, 1.5)
    with CountingDownstream() as downstream:
        f = fulfilment(FULFILMENT_ACTION=downstream.url, **reading(stripe_api))
        f.deliver(event)
        f.work()
        fields = redis.hmget(keys.payment(pk), "state", "waiting", "token")
        assert fields == [b"retrying", keys.STRIPE_WAIT.encode(), b"0"]  # no attempt
        work_until(f, redis, pk, "fulfilled")
    [body] = downstream.bodies
    assert lines_of(body) == (every, True) and body["token"] == 1


def test_a_key_stripe_refuses_fails_the_payment_without_a_call(
    fulfilment, redis: Redis, rng, stripe_api: EventsApi
) -> None:
    event, pk, _ = invoice_paid(rng, stripe_api)
    stripe_api.forbidden = True
    with CountingDownstream() as downstream:
        f = fulfilment(FULFILMENT_ACTION=downstream.url, **reading(stripe_api))
        f.deliver(event)
        work_until(f, redis, pk, "failed")
    assert not downstream.calls
    error = (redis.hget(keys.payment(pk), "last_error") or b"").decode()
    assert "Stripe's API refused STRIPE_API_KEY (403)" in error, error
    assert stripe_shown(API_KEY) not in error and "key 'rk_test_***'" in error  # kind only
    s = settings.load({}, STRIPE_API_KEY=API_KEY, STRIPE_API_BASE=stripe_api.url)
    refused = key_refused(s, False, False, True)  # as a worker checks it when it starts
    assert refused == "Stripe's API refused it (403) for reading Invoices"


def test_without_invoice_lines_the_action_is_told_the_lines_are_not_all(
    fulfilment, redis: Redis, rng, stripe_api: EventsApi
) -> None:
    event, pk, every = invoice_paid(rng, stripe_api)
    with CountingDownstream() as downstream:
        f = fulfilment(FULFILMENT_ACTION=downstream.url)
        f.deliver(event)
        work_until(f, redis, pk, "fulfilled")
    [body] = downstream.bodies
    assert lines_of(body) == (every[:CARRIED], False)
    assert purchase_validator().is_valid(body)
    assert not stripe_api.checkout_requests


def test_an_invoice_whose_event_carried_every_line_is_not_read(
    fulfilment, redis: Redis, rng, stripe_api: EventsApi
) -> None:
    event, pk, every = invoice_paid(rng, stripe_api, has_more=False)
    with CountingDownstream() as downstream:
        f = fulfilment(FULFILMENT_ACTION=downstream.url, **reading(stripe_api))
        f.deliver(event)
        work_until(f, redis, pk, "fulfilled")
    [body] = downstream.bodies
    assert lines_of(body) == (every, True)
    assert not stripe_api.checkout_requests


def test_a_reversal_gets_every_line_too(fulfilment, redis: Redis, rng, stripe_api) -> None:
    event, pk, every = invoice_paid(rng, stripe_api)
    with CountingDownstream() as downstream:
        f = fulfilment(
            FULFILMENT_ACTION=downstream.url, REVERSAL_ACTION=downstream.url, **reading(stripe_api)
        )
        f.deliver(event)
        work_until(f, redis, pk, "fulfilled")
        paid = event["data"]["object"]["amount_paid"]
        for refund in refund_events(rng, pk, paid, paid):
            f.deliver(refund)
        work_until(f, redis, pk, "reversed")
    fulfilled, reversed_ = downstream.bodies
    assert reversed_["idempotency_key"] == f"reverse:{pk}"
    assert lines_of(reversed_) == lines_of(fulfilled) == (every, True)
    assert stripe_api.checkout_requests[f"/v1/invoices/{fulfilled['invoice']['id']}/lines"] == 3


def test_the_paying_event_s_lines_replace_the_flag_with_them(
    fulfilment, redis: Redis, rng, stripe_api: EventsApi
) -> None:
    """invoice.payment_succeeded (not paying) fills what is missing, invoice.paid replaces:
    the flag goes with its lines, so it never describes another event's."""
    f: Fulfilment = fulfilment()
    paid, pk, _ = invoice_paid(rng, stripe_api)
    succeeded = {**paid, "id": samples.random_id(rng, "evt"), "type": "invoice.payment_succeeded"}
    succeeded["data"] = {"object": {**paid["data"]["object"]}}
    succeeded["data"]["object"]["lines"] = {**paid["data"]["object"]["lines"], "has_more": False}
    succeeded["data"]["object"]["lines"]["data"] = paid["data"]["object"]["lines"]["data"][:3]
    f.deliver(succeeded)
    assert redis.hget(keys.payment(pk), "p_in_more") == b"0"
    f.deliver(paid)
    assert redis.hget(keys.payment(pk), "p_in_more") == b"1"
    f.deliver({**succeeded, "id": samples.random_id(rng, "evt")})  # after the paying one
    assert redis.hget(keys.payment(pk), "p_in_more") == b"1"


def test_an_invoice_only_its_payment_intent_named_has_its_lines_read(
    fulfilment, redis: Redis, rng, stripe_api: EventsApi
) -> None:
    """Paid by its PaymentIntent's event before any invoice event came: the lines are not
    known, so they are read."""
    event = samples.event_of_type(rng, "payment_intent.succeeded")
    intent = event["data"]["object"]
    intent["invoice"] = "in_" + intent["id"].removeprefix("pi_")
    every = invoice_lines(CARRIED, intent["invoice"])
    stripe_api.add_invoice_lines(intent["invoice"], every)
    with CountingDownstream() as downstream:
        f = fulfilment(FULFILMENT_ACTION=downstream.url, **reading(stripe_api))
        f.deliver(event)
        work_until(f, redis, intent["id"], "fulfilled")
    [body] = downstream.bodies
    assert body["invoice"]["id"] == intent["invoice"]
    assert lines_of(body) == ([x["id"] for x in every], True)
