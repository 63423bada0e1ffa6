"""prove-action's purchases carry Checkout line items that add up to the amount paid, for
every paid type it sends (ledgerctl/prove_purchase.py)."""

import random

import pytest

from ledger.money import paid_amount
from ledger.purchase import purchase_of
from ledger.purchase_line_items import line_items_of
from ledgerctl import samples
from ledgerctl.prove import TEMPLATES
from ledgerctl.prove_purchase import PROVE_METADATA, marked, purchase_fields_of


@pytest.mark.parametrize("template", sorted(set(TEMPLATES.values())))
def test_each_purchase_has_two_line_items_adding_up_to_what_was_paid(template: str) -> None:
    event = samples.event_of_type(random.Random(7), template)
    marked(event)
    obj = event["data"]["object"]
    fields = purchase_fields_of(event)
    items = line_items_of(fields["p_items"])
    assert items is not None and len(items) == 2
    assert sum(item.amount_total or 0 for item in items) == paid_amount(obj)
    assert [item.quantity for item in items] == [2, 1]
    assert all(item.id and item.id.endswith(obj["id"]) for item in items)
    assert all(item.price_metadata == PROVE_METADATA for item in items)
    purchase = purchase_of("pk", 1, {**fields, "events": event["id"]})
    assert purchase.line_items == items and purchase.metadata
