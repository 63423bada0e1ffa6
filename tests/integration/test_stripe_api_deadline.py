"""Each request to Stripe's API ends within its timeout in all (ledger/stripe_http.py), not
only each read: an answer trickled a byte at a time, every byte well within the timeout,
held a worker (and then the next one) for as long as the sender went on."""

import subprocess
import sys
import threading

import pytest
import stripe
from redis import Redis

from ledger.settings import load
from ledger.stripe_api import StripeApi, StripeUnavailable, stripe_client
from tests.support.processes import ROOT
from tests.support.stripe_api import API_KEY, EventsApi

SESSION = {"id": "cs_test_trickled", "payment_intent": "pi_trickled", "metadata": {"a": "b" * 200}}

IN_GEVENT = """
from gevent import monkey

monkey.patch_all()
import sys

import stripe

from ledger.stripe_api import stripe_client

client = stripe_client("%s", sys.argv[1], timeout_s=0.5)
try:
    client.v1.checkout.sessions.retrieve("cs_test_trickled")
except stripe.APIConnectionError:
    print("cut")
"""


def trickling() -> EventsApi:
    api = EventsApi().start()
    api.add_session(SESSION, [])
    api.trickle_s = 0.05  # a whole answer takes over 10 s; each byte 0.05 s
    return api


def read_session(redis: Redis, url: str) -> None:
    reads = StripeApi(redis, load({}, STRIPE_API_KEY=API_KEY, STRIPE_API_BASE=url))
    reads.client = stripe_client(API_KEY, url, timeout_s=0.5)
    reads.session(SESSION["id"])


def test_a_trickled_answer_is_cut_at_the_deadline_and_the_payment_waits(redis: Redis) -> None:
    api = trickling()
    try:
        with pytest.raises(StripeUnavailable, match="APIConnectionError"):
            read_session(redis, api.url)
    finally:
        api.stop()
    assert len(api.trickled) == 1 and 0 < api.trickled[0] < 100, api.trickled


def test_so_it_is_in_a_worker_slot_thread(redis: Redis) -> None:
    api = trickling()
    raised: list[BaseException] = []

    def slot() -> None:
        try:
            read_session(redis, api.url)
        except StripeUnavailable as exc:
            raised.append(exc)

    try:
        thread = threading.Thread(target=slot, name="fulfil_1")
        thread.start()
        thread.join(timeout=30)
    finally:
        api.stop()
    assert len(raised) == 1 and api.trickled and api.trickled[0] < 100, api.trickled


def test_so_it_is_in_a_gevent_web_process() -> None:
    """The landing page reads a session from the web process, gevent-patched."""
    api = trickling()
    try:
        done = subprocess.run(
            [sys.executable, "-c", IN_GEVENT % API_KEY, api.url],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        api.stop()
    assert done.returncode == 0 and done.stdout.split() == ["cut"], done.stderr
    assert api.trickled and api.trickled[0] < 100, api.trickled


def test_reconcile_s_client_cuts_its_request_too() -> None:
    """Reconcile's client retries on its own (a list of events, read-only); stripe-python
    does not retry an answer cut short, so the run fails and the next one lists again."""
    api = trickling()
    try:
        client = stripe_client(API_KEY, api.url, retries=2, timeout_s=0.5)
        with pytest.raises(stripe.APIConnectionError):
            client.v1.checkout.sessions.retrieve(SESSION["id"])
    finally:
        api.stop()
    assert api.trickled and max(api.trickled) < 100, api.trickled
