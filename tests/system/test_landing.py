"""The landing page racing the webhook with real processes: gunicorn (2 processes), RQ
workers and the sweeper, Stripe's API the local stand-in. Fifty calls of the landing route
and fifty deliveries of the purchase's events at once: one downstream call. An unknown and
an unpaid session are refused and fulfil nothing; ``webhook-ledger fulfil-session`` in its
own process does what the route does."""

import json
import random
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests
from redis import Redis

from ledger import keys
from ledgerctl import samples
from tests.support.constants import BEARER
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import payment_key_of, signed_headers, state_of
from tests.support.processes import wait_until
from tests.support.purchases import ORDER, checkout_purchase, line_items, purchase_validator
from tests.support.stack import ROOMY
from tests.support.stripe_api import API_KEY, EventsApi

CALLS = 50


def with_stripe(stripe_api: EventsApi) -> dict[str, str]:
    return {
        "CHECKOUT_LINE_ITEMS": "true",
        "STRIPE_API_KEY": API_KEY,
        "STRIPE_API_BASE": stripe_api.url,
        "STRIPE_API_MAX_RATE": "25",  # Stripe's test-mode read rate
    }


def purchase(stripe_api: EventsApi, rng: random.Random, **fields: Any) -> tuple[list, str, str]:
    events = checkout_purchase(rng)
    session = events[3]["data"]["object"]
    session.update(fields)
    stripe_api.add_session(session, line_items(3, session["id"]))
    return events, session["id"], payment_key_of(events[2])


def landing(web_url: str, session_id: str) -> requests.Response:
    """The merchant's server on its success page: POST until answered (a 503 says when to
    ask again)."""
    while True:
        answer = requests.post(
            f"{web_url}/ops/api/checkout-sessions/{session_id}/fulfil", headers=BEARER, timeout=30
        )
        if answer.status_code != 503:
            return answer
        assert answer.json()["error"] == "stripe_api_unavailable", answer.text
        time.sleep(int(answer.headers["Retry-After"]))  # as a client honours it


def deliver(web_url: str, body: bytes) -> int:
    url = f"{web_url}/webhooks/stripe"
    return requests.post(url, data=body, headers=signed_headers(body), timeout=30).status_code


def test_fifty_landing_calls_racing_fifty_deliveries_make_one_call(
    stack, redis: Redis, rng, stripe_api
) -> None:
    events, cs, pk = purchase(stripe_api, rng)
    bodies = [samples.encode(events[i % 4]) for i in range(CALLS)]
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url, **with_stripe(stripe_api), **ROOMY)
        web = s.start_web()
        s.start_worker()
        s.start_worker()
        s.start_sweeper()
        with ThreadPoolExecutor(2 * CALLS) as pool:
            pages = [pool.submit(landing, web.url, cs) for _ in range(CALLS)]
            hooks = [pool.submit(deliver, web.url, body) for body in bodies]
            answers = [p.result() for p in pages]
            assert [h.result() for h in hooks] == [200] * CALLS
        wait_until(lambda: state_of(redis, pk) == "fulfilled", what="fulfilled")
        done = requests.get(
            f"{web.url}/ops/api/checkout-sessions/{cs}/fulfil", headers=BEARER, timeout=30
        ).json()
    assert downstream.calls[pk] == 1 and len(downstream.bodies) == 1
    assert {a.status_code for a in answers} == {200}
    assert {a.json()["payment_key"] for a in answers} == {pk}
    assert sum(a.json()["recorded"] for a in answers) <= 1
    assert done["state"] == "fulfilled" and done["receipt"] is not None
    assert done["client_reference_id"] == ORDER
    [body] = downstream.bodies
    assert purchase_validator().is_valid(body) and body["checkout_session_id"] == cs
    assert len(body["line_items"]) == 3
    assert redis.hget(keys.payment(pk), "token") == b"1"
    print(f"landing answers by state: {Counter(a.json()['state'] for a in answers)}")
    print(
        f"session reads from Stripe: {stripe_api.checkout_requests[f'/v1/checkout/sessions/{cs}']}"
    )


def test_unknown_and_unpaid_sessions_fulfil_nothing(stack, redis: Redis, rng, stripe_api) -> None:
    _, unpaid, unpaid_pk = purchase(stripe_api, rng, payment_status="unpaid")
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url, **with_stripe(stripe_api))
        web = s.start_web()
        s.start_worker()
        s.start_sweeper()
        unknown = landing(web.url, "cs_test_no_such_session")
        refused = landing(web.url, unpaid)
        polled = requests.get(
            f"{web.url}/ops/api/checkout-sessions/{unpaid}/fulfil", headers=BEARER, timeout=30
        )
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_session"
    assert refused.status_code == 409 and refused.json()["payment_status"] == "unpaid"
    assert polled.status_code == 404
    assert not downstream.calls and not redis.keys(keys.PAYMENT_PREFIX + "*")
    assert state_of(redis, unpaid_pk) == ""


def test_the_cli_fulfils_a_session_in_its_own_process(stack, redis: Redis, rng, stripe_api):
    _, cs, pk = purchase(stripe_api, rng)
    _, unpaid, _ = purchase(stripe_api, rng, payment_status="unpaid")
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url, **with_stripe(stripe_api))
        s.start_worker()
        s.start_sweeper()

        def cli(*args: str) -> subprocess.CompletedProcess:
            argv = [sys.executable, "-m", "ledgerctl.cli", "fulfil-session", *args]
            return subprocess.run(argv, env=s.env, capture_output=True, text=True, timeout=60)

        done = cli(cs, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["recorded"] is True
        wait_until(lambda: state_of(redis, pk) == "fulfilled", what="fulfilled")
        again = cli(cs, "--json")
        refused = cli(unpaid)
    assert json.loads(again.stdout)["state"] == "fulfilled" and downstream.calls[pk] == 1
    assert refused.returncode == 1 and "unpaid" in refused.stdout + refused.stderr
