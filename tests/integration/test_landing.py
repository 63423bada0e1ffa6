"""The landing page as a second trigger (ledger/landing.py, webhook/landing.py): the session
is read from Stripe's API (the local stand-in), never taken on the caller's word; a paid one
is recorded once as source ``api`` and fulfilled once whichever trigger came first; an
unknown or unpaid one fulfils nothing; the state is answered for polling."""

import json
from typing import Any

import pytest
from flask.testing import FlaskClient
from redis import Redis

from ledger import keys, landing
from ledger.read.events import SESSION_RECORD
from ledgerctl import samples
from tests.support.constants import BASIC, BEARER
from tests.support.helpers import cli_ok, payment_key_of, run_cli, signed_headers, state_of
from tests.support.inprocess import Fulfilment
from tests.support.processes import free_port
from tests.support.purchases import ORDER, checkout_purchase, line_items
from tests.support.stripe_api import API_KEY, EventsApi
from webhook import create_app


@pytest.fixture
def landing_config(config, stripe_api: EventsApi) -> dict[str, object]:
    return {**config, "STRIPE_API_KEY": API_KEY, "STRIPE_API_BASE": stripe_api.url}


@pytest.fixture
def ops(landing_config, redis: Redis) -> FlaskClient:
    return create_app(landing_config).test_client()


def purchase(
    stripe_api: EventsApi, rng, items: int = 3, **session: Any
) -> tuple[list[dict], str, str]:
    """A Checkout purchase whose session (with ``session``'s fields), PaymentIntent and
    ``items`` line items Stripe's API serves."""
    events = checkout_purchase(rng)
    obj = events[3]["data"]["object"]
    obj.update(session)
    stripe_api.add_session(obj, line_items(items, obj["id"]))
    stripe_api.intents[payment_key_of(events[2])] = events[2]["data"]["object"]
    return events, obj["id"], payment_key_of(events[2])


def url(session_id: str) -> str:
    return f"/ops/api/checkout-sessions/{session_id}/fulfil"


def test_a_paid_session_is_recorded_once_and_fulfilled_once(
    ops, redis: Redis, rng, stripe_api, fulfilment, landing_config
) -> None:
    events, cs, pk = purchase(stripe_api, rng)
    first = ops.post(url(cs), headers=BEARER)  # a bearer token and nothing else
    assert first.status_code == 200, first.text
    assert first.json | {"fulfilled_at": None} == {
        "session_id": cs,
        "payment_key": pk,
        "state": "queued",
        "fulfilled_at": None,
        "receipt": None,
        "waiting": None,
        "client_reference_id": ORDER,
        "payment_status": "paid",
        "recorded": True,
    }
    record = redis.hgetall(keys.event(landing.RECORD_PREFIX + cs))
    assert record[b"origin"] == b"api" and record[b"type"] == SESSION_RECORD.encode()
    assert record[b"n"] == b"0" and record[b"pk"] == pk.encode()
    page = ops.get(f"/ops/events/{landing.RECORD_PREFIX + cs}", headers=BEARER)
    assert "the Checkout Session, read for the landing page" in page.text
    again = ops.post(url(cs), headers=BEARER)
    assert again.status_code == 200 and again.json["recorded"] is False
    assert stripe_api.checkout_requests[f"/v1/checkout/sessions/{cs}"] == 1  # known paid: no read
    # the webhook's events come after: one payment, one job
    delivered_and_worked(ops, fulfilment, landing_config, events)
    assert state_of(redis, pk) == "fulfilled"
    assert redis.hget(keys.payment(pk), "token") == b"1"
    done = ops.get(url(cs), headers=BEARER).json
    assert done["state"] == "fulfilled" and done["receipt"]
    assert done["payment_status"] == "paid"  # as the ledger recorded the session
    shown = ops.get(f"/ops/api/payments/{pk}", headers=BEARER).json
    assert shown["purchase"]["checkout_session"]["client_reference_id"] == ORDER
    assert int(redis.hget(keys.STATS, "reconciled")) == 1  # counted apart from deliveries


def test_the_webhook_first_then_the_landing_page_reads_nothing_from_stripe(
    ops, redis: Redis, rng, stripe_api
) -> None:
    events, cs, pk = purchase(stripe_api, rng)
    for event in events:
        body = samples.encode(event)
        assert ops.post(
            "/webhooks/stripe", data=body, headers=signed_headers(body)
        ).status_code == (200)
    answer = ops.post(url(cs), headers=BEARER)
    assert answer.status_code == 200 and answer.json["payment_key"] == pk
    assert answer.json["state"] == "queued" and answer.json["recorded"] is False
    assert not stripe_api.checkout_requests


@pytest.mark.parametrize("session_id", ["cs_test_missing", "pi_not_a_session", "cs_bad-id.json"])
def test_an_unknown_session_is_404_and_fulfils_nothing(ops, redis, stripe_api, session_id) -> None:
    answer = ops.post(url(session_id), headers=BEARER)
    assert answer.status_code == 404 and answer.json["error"] == "unknown_session", answer.text
    assert ops.get(url(session_id), headers=BEARER).status_code == 404
    assert not redis.keys(keys.PAYMENT_PREFIX + "*")


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({"payment_status": "unpaid"}, "unpaid"),
        ({"mode": "subscription", "payment_intent": None}, "paid"),
    ],
)
def test_an_unpaid_session_is_409_and_fulfils_nothing(
    ops, redis: Redis, rng, stripe_api, fields, status
) -> None:
    _, cs, pk = purchase(stripe_api, rng, **fields)
    answer = ops.post(url(cs), headers=BEARER)
    assert answer.status_code == 409, answer.text
    assert answer.json["error"] == "session_not_paid"
    assert answer.json["payment_status"] == status
    assert not redis.keys(keys.PAYMENT_PREFIX + "*") and not redis.exists(keys.DUE)


def test_stripe_unreachable_is_503_with_retry_after(ops, redis: Redis, rng, stripe_api) -> None:
    _, cs, _ = purchase(stripe_api, rng)
    stripe_api.fail_for(429, 60)
    answer = ops.post(url(cs), headers=BEARER)
    assert answer.status_code == 503 and answer.json["error"] == "stripe_api_unavailable"
    assert int(answer.headers["Retry-After"]) >= 1
    assert not redis.keys(keys.PAYMENT_PREFIX + "*")


def test_without_stripe_api_key_only_a_known_paid_payment_is_answered(
    config, redis: Redis, rng, stripe_api
) -> None:
    ops = create_app(config).test_client()
    events, cs, pk = purchase(stripe_api, rng)
    assert ops.post(url(cs), headers=BEARER).json["error"] == "stripe_api_key_missing"
    body = samples.encode(events[3])
    assert ops.post("/webhooks/stripe", data=body, headers=signed_headers(body)).status_code == 200
    assert ops.post(url(cs), headers=BEARER).json["state"] == "queued"


def test_bearer_needs_no_csrf_token_and_basic_auth_still_does(ops) -> None:
    assert ops.post("/ops/api/fulfilment/pause", headers=BEARER).status_code == 200
    assert ops.post("/ops/api/fulfilment/resume", headers=BASIC).status_code == 403
    assert ops.post("/ops/fulfilment/resume", headers=BASIC).status_code == 403


def test_the_cli_fulfils_a_session(landing_config, redis: Redis, rng, stripe_api) -> None:
    _, cs, pk = purchase(stripe_api, rng)
    done = run_cli(landing_config, "fulfil-session", cs, "--json")
    assert cli_ok(done), done.output
    assert json.loads(done.output)["state"] == "queued" and state_of(redis, pk) == "queued"
    shown = run_cli(landing_config, "fulfil-session", cs)
    assert cli_ok(shown) and pk in shown.output and "queued" in shown.output
    _, unpaid, _ = purchase(stripe_api, rng, payment_status="unpaid")
    refused = run_cli(landing_config, "fulfil-session", unpaid)
    assert cli_ok(refused, 1) and "unpaid" in refused.output
    assert cli_ok(run_cli(landing_config, "fulfil-session", "cs_test_none"), 1)
    check = run_cli(landing_config, "fulfil-session", cs, "--check", "--json")
    assert cli_ok(check) and json.loads(check.output)["payment_key"] == pk


def test_the_cli_says_stripe_s_api_did_not_answer_once(config, redis: Redis) -> None:
    unreachable = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {**config, "STRIPE_API_KEY": API_KEY, "STRIPE_API_BASE": unreachable}
    done = run_cli(env, "fulfil-session", "cs_test_a1")
    assert cli_ok(done, 4)
    assert done.output == "Stripe's API: APIConnectionError reading cs_test_a1\n"


@pytest.mark.parametrize(("items", "pages_read"), [(3, 0), (25, 1)])
def test_the_landing_page_alone_gives_the_whole_purchase(
    redis: Redis, rng, stripe_api, fulfilment, landing_config, items: int, pages_read: int
) -> None:
    """The session read with its PaymentIntent and line items expanded: the one call has the
    PaymentIntent's metadata and every line item, read once (the expanded first page when
    it is all of them, else every page by the worker)."""
    config = {**landing_config, "CHECKOUT_LINE_ITEMS": "true"}
    ops = create_app(config).test_client()
    _, cs, pk = purchase(stripe_api, rng, items)
    assert ops.post(url(cs), headers=BEARER).json["state"] == "queued"
    f: Fulfilment = fulfilment(
        **{k: str(v) for k, v in config.items() if k.startswith(("STRIPE", "CHECKOUT"))}
    )
    f.work()
    assert state_of(redis, pk) == "fulfilled"
    assert stripe_api.checkout_requests[f"/v1/checkout/sessions/{cs}/line_items"] == pages_read
    shown = ops.get(f"/ops/api/payments/{pk}", headers=BEARER).json["purchase"]
    assert shown["metadata"]["payment_intent"] == {"source": "payment_intent"}
    assert shown["checkout_session"]["id"] == cs and len(shown["line_items"]) == items


def test_a_session_paid_later_is_fulfilled_when_asked_again(ops, redis: Redis, rng, stripe_api):
    """An unpaid session records nothing, so the same session asked again once Stripe says
    it is paid (a delayed payment method) is recorded then."""
    _, cs, pk = purchase(stripe_api, rng, payment_status="unpaid")
    assert ops.post(url(cs), headers=BEARER).status_code == 409
    stripe_api.sessions[cs]["payment_status"] = "paid"
    answer = ops.post(url(cs), headers=BEARER)
    assert answer.status_code == 200 and answer.json["recorded"] is True
    assert state_of(redis, pk) == "queued"


def test_a_session_completed_unpaid_reads_paid_once_its_payment_is(
    ops, redis, rng, stripe_api, fulfilment, landing_config
) -> None:
    """An asynchronous method's session completes unpaid and its PaymentIntent succeeds
    after: the payment is fulfilled, and the trigger's answers said ``unpaid`` (reviewer)."""
    events, cs, pk = purchase(stripe_api, rng, payment_status="unpaid")
    delivered_and_worked(ops, fulfilment, landing_config, [events[i] for i in (0, 1, 3, 2)])
    assert state_of(redis, pk) == "fulfilled"
    for answer in (ops.get(url(cs), headers=BEARER), ops.post(url(cs), headers=BEARER)):
        assert (answer.json["state"], answer.json["payment_status"]) == ("fulfilled", "paid")


def delivered_and_worked(ops: Any, fulfilment: Any, landing_config: dict, events: list) -> None:
    """``events`` through the webhook endpoint, each answered 200, then one worker's turn."""
    for event in events:
        body = samples.encode(event)
        answer = ops.post("/webhooks/stripe", data=body, headers=signed_headers(body))
        assert answer.status_code == 200
    f: Fulfilment = fulfilment(
        **{k: v for k, v in landing_config.items() if k.startswith("STRIPE")}
    )
    f.work()
