"""Stripe's API client (ledger/stripe_api.py) follows no redirect: requests follows a GET's
3xx by default, which would send STRIPE_API_KEY wherever a Location points."""

import pytest
from redis import Redis

from ledger.settings import load
from ledger.stripe_api import StripeApi, StripeRefused
from tests.support.stripe_api import API_KEY, EventsApi


def test_a_redirect_from_stripes_api_is_refused_not_followed(redis: Redis) -> None:
    here, elsewhere = EventsApi().start(), EventsApi().start()
    try:
        elsewhere.add_session({"id": "cs_test_redirected", "payment_intent": "pi_x"}, [])
        here.redirect_to = elsewhere.url
        settings = load({}, STRIPE_API_KEY=API_KEY, STRIPE_API_BASE=here.url)
        with pytest.raises(StripeRefused, match="302"):
            StripeApi(redis, settings).session("cs_test_redirected")
    finally:
        here.stop()
        elsewhere.stop()
    assert (here.requests_seen, elsewhere.requests_seen) == (1, 0)
