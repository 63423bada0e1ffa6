"""A payment Stripe said did not go through (its payment failed, an async payment failed, a
session expired) stays pending: its page and ``webhook-ledger payment`` say why, instead of
"no paid event yet" as if its paid event were only late (merchant review)."""

import random
from typing import Any

from ledgerctl import samples
from tests.support.constants import BASIC
from tests.support.helpers import payment_key_of, run_cli, settled_as


def test_a_payment_that_failed_says_so_and_one_paid_after_it_does_not(
    client: Any, config: dict[str, object], fulfilment: Any, redis: Any, rng: random.Random
) -> None:
    f = fulfilment()
    failed = samples.event_of_type(rng, "payment_intent.payment_failed")
    f.deliver(failed)
    pk = payment_key_of(failed)
    f.work()
    assert settled_as(redis, pk, "pending")
    said = "not paid: payment_intent.payment_failed came; it is fulfilled only if a paid event"
    page = client.get(f"/ops/payments/{pk}", headers=BASIC).get_data(as_text=True)
    assert 'id="not-paid"' in page and said in page
    assert said in " ".join(run_cli(config, "payment", pk).stdout.split())

    card = samples.payment_events(rng)  # paid, with no failure before it
    for event in card:
        f.deliver(event)
    f.work()
    paid = payment_key_of(card[0])
    page = client.get(f"/ops/payments/{paid}", headers=BASIC).get_data(as_text=True)
    assert settled_as(redis, paid, "fulfilled") and 'id="not-paid"' not in page
