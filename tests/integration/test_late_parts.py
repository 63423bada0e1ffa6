"""A payment fulfilled before its Checkout Session's event came (CHECKOUT_WAIT_SECONDS=0 and
Stripe's usual order: charge.succeeded, payment_intent.succeeded, then
checkout.session.completed): its page, the API and ``webhook-ledger payment`` show the
session it has now, and say that the call which fulfilled it had none
(ledger/read/late_parts.py). Before, all three showed the session's order id and metadata
as what the action got."""

import html
import json

from redis import Redis

from ledger import keys
from ledger.purchase_fields import NO_SESSION, NOT_ASKED
from tests.support.constants import BASIC, BEARER
from tests.support.helpers import payment_key_of, run_cli, settled_as, state_of
from tests.support.inprocess import Fulfilment
from tests.support.processes import wait_until
from tests.support.purchases import ORDER, checkout_purchase

SAID = "the Checkout Session's event came after its fulfilment: the call had no session"


def test_a_session_after_the_fulfilling_call_is_said_to_be_missing_from_it(
    fulfilment, client, config, redis: Redis, rng
) -> None:
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    for event in events[:3]:  # payment_intent.created, charge.succeeded, .succeeded
        f.deliver(event)
    f.work()
    pk, session = payment_key_of(events[2]), events[3]
    assert settled_as(redis, pk, "fulfilled")
    f.deliver(session)
    one = client.get(f"/ops/api/payments/{pk}", headers=BEARER).get_json()
    assert one["purchase"]["client_reference_id"] == ORDER  # what the ledger holds now
    [late] = one["came_after_fulfilment"]
    assert (late["part"], late["event_id"], late["fulfilled_by"]) == (
        "checkout_session",
        session["id"],
        1,
    )
    assert late["first_recorded_at"] > late["call_started_at"]
    assert late["note"].startswith(SAID) and "CHECKOUT_WAIT_SECONDS=0" in late["note"]
    page = html.unescape(client.get(f"/ops/payments/{pk}", headers=BASIC).get_data(as_text=True))
    assert 'id="came-after-fulfilment-checkout_session"' in page and SAID in page
    assert "as the action gets it" not in page
    shown = " ".join(run_cli(config, "payment", pk).stdout.split())
    assert SAID in shown and f"checkout.session.completed {session['id']}" in shown, shown
    assert "after attempt 1 started" in shown


def test_a_session_before_the_call_is_not_named(fulfilment, client, config, redis, rng) -> None:
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    for event in events:
        f.deliver(event)
    f.work()
    pk = payment_key_of(events[2])
    assert settled_as(redis, pk, "fulfilled")
    one = client.get(f"/ops/api/payments/{pk}", headers=BEARER).get_json()
    assert one["came_after_fulfilment"] == []
    page = client.get(f"/ops/payments/{pk}", headers=BASIC).get_data(as_text=True)
    assert "came-after-fulfilment" not in page
    assert "after its fulfilment" not in run_cli(config, "payment", pk).stdout


def test_a_session_after_the_wait_ran_out_says_so(fulfilment, client, redis: Redis, rng) -> None:
    """CHECKOUT_WAIT_SECONDS on, no key to look the session up with: the payment waits, then
    is fulfilled without a session; the session's event after that is named, and why."""
    f: Fulfilment = fulfilment(CHECKOUT_WAIT_SECONDS="0.3")
    events = checkout_purchase(rng)
    for event in events[:3]:
        f.deliver(event)
    pk = payment_key_of(events[2])

    def fulfilled() -> bool:
        f.work()
        f.sweep()
        return state_of(redis, pk) == "fulfilled"

    wait_until(fulfilled, 30, what="fulfilled once the wait ran out")
    # the wait ran out: no session, and no key to ask Stripe's API with
    assert redis.hget(keys.payment(pk), NO_SESSION) == NOT_ASKED.encode()
    f.deliver(events[3])
    one = client.get(f"/ops/api/payments/{pk}", headers=BEARER).get_json()
    [late] = one["came_after_fulfilment"]
    assert late["part"] == "checkout_session", json.dumps(one["came_after_fulfilment"])
    assert "CHECKOUT_WAIT_SECONDS ran out first; no STRIPE_API_KEY" in late["note"]
