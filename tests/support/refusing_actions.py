"""A replay-safe action that refuses (tests/integration/test_refused_refund.py): each call
is counted here (the job runs in the test's own process), then answered as ``ANSWERS``
says, one answer per call of a payment, the last one repeated."""

from collections import Counter

from workers.api import DownstreamDown, GiveUp, Purchase, Receipt, RetryLater, replay_safe

CALLS: Counter[str] = Counter()
"""Calls by payment key."""
ANSWERS: list[str] = ["give_up"]
"""give_up, retry_later, refused (DownstreamDown, sent=False), down (DownstreamDown: its
request left, the call may have applied), or crash: an exception the action does not name
(it may have got anywhere: the call may have applied)."""


@replay_safe
def refuse(purchase: Purchase) -> Receipt:
    """Applies nothing: a refusal, or a crash that leaves it unknown."""
    pk = purchase["payment_key"]
    CALLS[pk] += 1
    answer = ANSWERS[min(CALLS[pk], len(ANSWERS)) - 1]
    if answer == "give_up":
        raise GiveUp(f"{pk}: no such product")
    if answer == "retry_later":
        raise RetryLater(f"{pk}: stock not in yet")
    if answer == "refused":
        raise DownstreamDown(f"{pk}: the shop is in maintenance", sent=False)
    if answer == "down":
        raise DownstreamDown(f"{pk}: the shop's gateway answered 502")
    raise RuntimeError(f"{pk}: the shop's API ended mid-write")
