"""What a payment's refund fields say was refunded (ledger/reversals.py, the same rule as
refunds.lua's refund_total): a failed refund comes off the charge figure that counted it,
never off one that came after its failure."""

import json

from ledger.limits import NOTE_BYTES
from ledger.refunds_counted import refunded_amount
from ledger.reversals import taken_of

REFUND = {"id": "re_1", "object": "refund", "amount": 500, "created": 100, "status": "succeeded"}


def test_a_failed_refund_is_read_with_its_amount_when_made_and_when_said() -> None:
    taken = json.loads(taken_of("refund.failed", {**REFUND, "status": "failed"}, 900))
    assert taken["refunds"] == {"re_1": -1} and taken["failed"] == {"re_1": [500, 100, 900]}


def test_a_charge_event_gives_its_figure_and_its_time() -> None:
    charge = {"object": "charge", "amount_refunded": 500, "refunds": {"data": [REFUND]}}
    taken = json.loads(taken_of("charge.refunded", charge, 200))
    assert taken == {
        "refunds": {"re_1": 500},
        "charge_refunded": 500,
        "charge_at": 200,
        "notes": {"re_1": [200, None, {}, 0]},
    }


def stored(charge_at: int, failed_at: int) -> dict[str, str]:
    return {
        "rf": json.dumps({"re_1": -1}),
        "rf_charge": "500",
        "rf_charge_at": str(charge_at),
        "rf_failed": json.dumps({"re_1": [500, 100, failed_at]}),
    }


def test_a_refund_that_failed_after_the_charge_event_no_longer_counts() -> None:
    assert refunded_amount(stored(charge_at=200, failed_at=900)) == 0


def test_a_charge_event_after_the_failure_is_believed_as_it_is() -> None:
    """Another refund of the whole amount made after the first failed."""
    assert refunded_amount(stored(charge_at=1000, failed_at=900)) == 500


def test_without_a_failure_the_larger_of_the_refunds_and_the_charge() -> None:
    assert refunded_amount({"rf": json.dumps({"re_1": 200}), "rf_charge": "500"}) == 500
    assert refunded_amount({"rf": json.dumps({"re_1": 200, "re_2": 400})}) == 600


def test_a_refunds_reason_and_metadata_are_kept_within_stripes_own_bounds() -> None:
    """A refund's note is kept as Stripe could send it, no larger (50 keys of 40 characters,
    values of 500), and its metadata within NOTE_BYTES: keys past it are left out; a value
    that is not text (not Stripe's) is left out, not kept as JSON."""
    metadata = {f"k{i:02d}" + "x" * 60: "v" * 600 for i in range(60)} | {"n": 1}
    refund = {"id": "re_1", "object": "refund", "amount": 5, "status": "succeeded"}
    taken = json.loads(taken_of("refund.created", refund | {"metadata": metadata}, 7))
    created, reason, kept, updated = taken["notes"]["re_1"]
    assert (created, reason, updated) == (7, None, 0)
    assert all(len(k) == 40 and len(v) == 500 for k, v in kept.items())
    size = len(json.dumps(kept, separators=(",", ":")))
    assert size <= NOTE_BYTES < size + 545  # no room for another key
    few = {f"k{i}": "v" * 500 for i in range(50)}  # 26 KB: as many keys as fit, in order
    fit = json.loads(taken_of("refund.created", refund | {"metadata": few}, 7))["notes"]["re_1"][2]
    assert list(fit) == list(few)[: len(fit)] and 0 < len(fit) < 50
    assert len(json.dumps(fit, separators=(",", ":"))) <= NOTE_BYTES
    named = refund | {"reason": "fraudulent", "metadata": {"line_item": "li_1"}}
    assert json.loads(taken_of("refund.updated", named, 9))["notes"] == {
        "re_1": [9, "fraudulent", {"line_item": "li_1"}, 1]
    }
