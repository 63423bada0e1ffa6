"""The reversal view of a payment hash (ledger/read/reversal.py), as the API, the dashboard
and the CLI show it."""

import orjson

from ledger.read.reversal import payment_reversal


def test_a_payment_reversed_refund_by_refund_up_to_its_amount_was_taken_back() -> None:
    """REVERSAL_PER_REFUND, two refunds recorded during the fulfilment's call, each reversed
    after it: the payment is ``reversed`` and no take-back of the whole stored
    ``taken_back``; the view said "no: its refunds reversed on their own" (merchant
    review)."""
    each = {"re_1": 700, "re_2": 1300}
    f = {
        "state": "reversed",
        "amount": "2000",
        "currency": "usd",
        "paid_at": "1",
        "rf": orjson.dumps(each).decode(),
        "rv": orjson.dumps(each).decode(),
        "reversed_amount": "2000",
    }
    view = payment_reversal("pi_1", f)
    assert view is not None and view.taken_back == "refund"
    partial = payment_reversal("pi_1", {**f, "state": "fulfilled", "rf": '{"re_1": 700}'})
    assert partial is not None and partial.taken_back is None
