"""The example shop (examples/shop) with the real service: signed Checkout events through
gunicorn's endpoint, a real worker with the PostgreSQL action granting into the shop's own
table, and the shop's page showing the entitlement once; refunded in full, revoked once."""

import json
import random

import psycopg

from examples.shop import create_app, migrate
from ledger.downstream import open_downstream
from ledgerctl import samples
from tests.support.helpers import payment_key_of, settled_as
from tests.support.processes import ROOT, wait_until
from tests.support.refunds import refund_events
from tests.support.replay import replay

GRANT = f"@{ROOT / 'examples' / 'shop' / 'grant.sql'}"
REVOKE = f"@{ROOT / 'examples' / 'shop' / 'revoke.sql'}"


def test_a_checkout_purchase_shows_one_entitlement_revoked_once_refunded(
    stack, redis, postgres_url
) -> None:
    migrate(postgres_url)
    migrate(postgres_url)  # idempotent: run.sh migrates on every start
    s = stack(
        FULFILMENT_ACTION=postgres_url,
        FULFILMENT_SQL=GRANT,
        REVERSAL_ACTION=postgres_url,
        REVERSAL_SQL=REVOKE,
    )
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
    amount = paid_intent["data"]["object"]["amount_received"]
    for event in refund_events(random.Random(5), pk, amount, amount) * 2:  # sent twice
        assert s.send(samples.encode(event)).status_code == 200
    wait_until(lambda: settled_as(redis, pk, "reversed"), what=f"{pk} reversed")
    page = shop.get("/?ref=order-42").get_data(as_text=True)
    assert page.count('class="entitlement"') == 0 and page.count('class="revoked"') == 1, page
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT revoked_at FROM entitlements WHERE payment_key = %s", (pk,))
        assert [row[0] is not None for row in rows] == [True]  # one grant, revoked
        found = conn.execute(
            "SELECT idempotency_key FROM webhook_ledger_effects WHERE payment_key = %s", (pk,)
        )
        assert sorted(row[0] for row in found) == [f"fulfil:{pk}", f"reverse:{pk}"]  # once each


def test_a_replay_beside_the_shop_counts_effects_from_the_ledger(
    stack, redis, postgres_url, tmp_path
) -> None:
    """Run from another terminal without the shop's FULFILMENT_ACTION (its password stays in
    run.sh), with an earlier run's SQLite downstream file on disk: the workers' calls went to
    PostgreSQL, so that file is not read as their record, and nothing is called unfulfilled."""
    migrate(postgres_url)
    s = stack(FULFILMENT_ACTION=postgres_url, FULFILMENT_SQL=GRANT)
    web = s.start_service(workers=2)
    old = tmp_path / "downstream.sqlite3"
    open_downstream(str(old)).close()  # what a run with the default action left
    env = {k: v for k, v in s.env.items() if k != "FULFILMENT_SQL"}
    env["FULFILMENT_ACTION"] = f"sqlite:///{old}"
    args = ("--generate", "2", "--expect-once")
    _, report = replay(env, f"{web.url}/webhooks/stripe", *args, out=tmp_path / "r.json")
    assert report["layers"]["downstream"]["source"] == "ledger (no downstream record)"
    assert report["layers"]["downstream"]["effects"] == 2 and report["findings"]["ok"]
    assert report["layers"]["downstream"]["calls"] is None  # the ledger does not count calls
    [note] = [n for n in report["notes"] if "calls went to" in n]
    assert note.startswith("the workers' calls went to postgresql:") and str(old) in note
    assert postgres_url.split("@")[0].split(":")[-1] not in json.dumps(report)  # no password
