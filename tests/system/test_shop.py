"""The example shop (examples/shop) with the real service: signed Checkout events through
gunicorn's endpoint, a real worker with the PostgreSQL action granting into the shop's own
table, and the shop's page showing the entitlement once."""

import random

from examples.shop import create_app, migrate
from ledgerctl import samples
from tests.support.helpers import payment_key_of, settled_as
from tests.support.processes import ROOT, wait_until

GRANT = f"@{ROOT / 'examples' / 'shop' / 'grant.sql'}"


def test_a_checkout_purchase_shows_one_entitlement(stack, redis, postgres_url) -> None:
    migrate(postgres_url)
    migrate(postgres_url)  # idempotent: run.sh migrates on every start
    s = stack(FULFILMENT_ACTION=postgres_url, FULFILMENT_SQL=GRANT)
    s.start_service(workers=2)
    events = samples.payment_events(random.Random(4), checkout=True)
    paid_intent, session = events[2], events[3]
    order = session["data"]["object"]
    order["client_reference_id"] = "order-42"
    order["customer_details"]["email"] = "ada@example.com"
    for event in (session, paid_intent, session, paid_intent):  # each delivered twice
        assert s.send(samples.encode(event)).status_code == 200
    pk = payment_key_of(paid_intent)
    wait_until(lambda: settled_as(redis, pk, "fulfilled"), what=f"{pk} fulfilled")
    shop = create_app({"DATABASE_URL": postgres_url, "TESTING": True}).test_client()
    for query in ("ref=order-42", "email=ADA@example.com"):
        page = shop.get(f"/?{query}").get_data(as_text=True)
        assert page.count('class="entitlement"') == 1, page
        assert pk in page and "pro-plan" in page
    assert "No entitlement yet" in shop.get("/?ref=order-43").get_data(as_text=True)
