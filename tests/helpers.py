"""Small helpers shared by tests: signed requests and ledger reads."""

import random
from typing import Any

from redis import Redis

from tests.conftest import SECRET
from webhook import keys, samples

STRIPE_UA = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"


def signed_headers(body: bytes, secret: str = SECRET, **kwargs: Any) -> dict[str, str]:
    return {
        "Content-Type": "application/json; charset=utf-8",
        "User-Agent": STRIPE_UA,
        "Stripe-Signature": samples.sign(body, secret, **kwargs),
    }


def paid_event(rng: random.Random) -> tuple[dict[str, Any], bytes]:
    event = samples.payment_events(rng)[2]
    return event, samples.encode(event)


def stats(redis: Redis) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in redis.hgetall(keys.STATS).items()}


def ledger_keys(redis: Redis) -> set[str]:
    return {k.decode() for k in redis.scan_iter(match="*")}
