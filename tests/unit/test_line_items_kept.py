"""A Checkout Session's line items kept with the payment (ledger/purchase_line_items.py): what
a grant per item needs (its id, its price's lookup key and metadata, the discount and tax),
and rows kept before those fields came still read."""

from ledger.purchase_line_items import line_items_of, pack_line_items
from tests.support.purchases import line_items


def test_each_item_keeps_its_id_its_price_s_key_and_metadata_and_its_amounts() -> None:
    assert line_items_of(None) is None  # none read
    kept = line_items_of(pack_line_items(line_items(2, "cs_test_abcdefgh")))
    assert kept is not None and len(kept) == 2
    second = kept[1]
    assert (second.id, second.price, second.product) == (
        "li_abcdefgh000001",
        "price_0000000001",
        "prod_0000000001",
    )
    assert (second.quantity, second.unit_amount, second.amount_total) == (2, 500, 1000)
    assert (second.amount_subtotal, second.amount_discount, second.amount_tax) == (1000, 0, 0)
    assert (second.price_lookup_key, second.price_metadata) == ("sticker_1", {"credits": "20"})


def test_a_row_kept_before_the_new_fields_reads_them_as_none() -> None:
    old = '[["price_1","prod_1",1,500,500,"usd","Sticker"]]'
    (item,) = line_items_of(old) or []
    assert (item.price, item.quantity, item.description) == ("price_1", 1, "Sticker")
    assert item.id is None and item.price_metadata is None and item.amount_tax is None
