"""examples/actions.py's grant per line item and its take-back, as a merchant sets them on
the PostgreSQL action: a refund whose metadata names one line item takes back that item
alone; the refund of what remains takes back the rest; each reversal once per key."""

import json

import psycopg

from ledger import settings as settings_module
from ledger.purchase import purchase_of
from ledger.purchase_line_items import pack_line_items
from ledger.reversals import reversal_of
from workers.actions import build_action, build_reversal_action, unusable
from workers.postgres_schema import migrate

ITEMS = [
    {"id": f"li_{name}", "price": {"id": f"price_{name}", "lookup_key": name}, "quantity": 1,
     "amount_total": 1000, "currency": "usd"}
    for name in ("socks", "hat")
]  # fmt: skip


def stored(**more: str) -> dict[str, str]:
    paid = {"amount": "2000", "currency": "usd", "events": "evt_1"}
    return {**paid, "p_items": pack_line_items(ITEMS), **more}


def granted(url: str) -> list[tuple[str, bool]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT line_item, revoked_at IS NOT NULL FROM item_grants ORDER BY 1")
        return rows.fetchall()


def test_a_refund_naming_a_line_item_takes_back_that_item_alone(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE item_grants (payment_key text, line_item text PRIMARY KEY,"
            " price_lookup_key text, quantity int, revoked_at timestamptz)"
        )
    migrate(postgres_url)
    s = settings_module.load(
        {},
        FULFILMENT_ACTION=postgres_url,
        FULFILMENT_EFFECT="examples.actions:grant_items",
        REVERSAL_ACTION=postgres_url,
        REVERSAL_EFFECT="examples.actions:take_back_items",
        REVERSAL_PER_REFUND="1",
    )
    assert unusable(s) is None
    fulfil, reverse = build_action(s), build_reversal_action(s)
    answer = fulfil(purchase_of("pi_items", 1, stored()))
    assert answer["receipt"] == {"granted": ["li_socks", "li_hat"]}
    assert granted(postgres_url) == [("li_hat", False), ("li_socks", False)]

    notes = {"re_1": [1, "requested_by_customer", {"line_item": "li_hat"}, 0]}
    one = stored(rf=json.dumps({"re_1": 1000}), notes=json.dumps(notes), reversal_why="refund")
    one |= {"reversal_refund": "re_1", "reversal_amount": "1000"}
    call = reversal_of(purchase_of("pi_items", 2, one), one)
    assert reverse(call)["receipt"] == {"revoked": ["li_hat"], "why": "refund"}
    assert reverse(call)["outcome"] == "already_applied"  # once per reversal key
    assert granted(postgres_url) == [("li_hat", True), ("li_socks", False)]

    rest = stored(rf=json.dumps({"re_1": 1000, "re_2": 1000}), reversal_why="refund")
    rest |= {"reversal_amount": "1000", "notes": json.dumps(notes)}
    answer = reverse(reversal_of(purchase_of("pi_items", 3, rest), rest))
    assert answer["receipt"] == {"revoked": ["li_socks"], "why": "refund"}
    assert granted(postgres_url) == [("li_hat", True), ("li_socks", True)]
