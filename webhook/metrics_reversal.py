"""What refunds and lost disputes took back, on ``/metrics`` (docs/REVERSAL.md): the
reversals due, applied (those of one refund too) and resolved by a person, the payments
refunded before any effect, those given back after (a dispute won, a refund failed) and the
fulfilments again that followed, and the payments that wait for a person by what they wait
on (their fulfilment or their reversal), which the alerting rules watch
(deploy/prometheus/alerts.yml: WebhookPaymentsNeedAPerson, WebhookReversalNeedsAPerson)."""

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from redis import Redis

from ledger.read.reversal_counts import ReversalCounts, needs_a_person


def reversal_families(
    redis: Redis, counts: ReversalCounts
) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    yield CounterMetricFamily(
        "webhook_reversals_due",
        "Reversals that became due: a fulfilled payment refunded in full or whose dispute was "
        "lost, with REVERSAL_ACTION set.",
        value=counts.due,
    )
    yield CounterMetricFamily(
        "webhook_reversal_effects",
        "Reversals the reversal action applied (the payment reversed).",
        value=counts.reversed,
    )
    yield CounterMetricFamily(
        "webhook_refund_reversals",
        "Of the reversals applied, those of one refund (REVERSAL_PER_REFUND).",
        value=counts.refund_reversals,
    )
    yield CounterMetricFamily(
        "webhook_reversals_resolved",
        "Reversals a person resolved as applied.",
        value=counts.resolved_reversed,
    )
    yield CounterMetricFamily(
        "webhook_refunded_unfulfilled",
        "Payments refunded in full (or a dispute lost) before any effect: never called, or "
        "a settlement voided the key.",
        value=counts.refunded_unfulfilled,
    )
    yield CounterMetricFamily(
        "webhook_reversals_reinstated",
        "Payments taken back (reversed, refunded before any effect) that Stripe then gave back "
        "(a dispute won, a refund failed): held for a person, or fulfilled again "
        "(REVERSAL_DISPUTE_WON=fulfil).",
        value=counts.reinstated,
    )
    yield CounterMetricFamily(
        "webhook_refulfils_due",
        "Fulfilments again that became due after a dispute won (REVERSAL_DISPUTE_WON=fulfil).",
        value=counts.refulfils_due,
    )
    yield CounterMetricFamily(
        "webhook_refulfilled",
        "Fulfilments again after a dispute won that the fulfilment action applied.",
        value=counts.refulfilled,
    )
    yield CounterMetricFamily(
        "webhook_settlements_due",
        "Payments taken back after an attempt of a built-in action that may have applied: "
        "settled by the action (its key found, or voided) instead of held for a person.",
        value=counts.settles_due,
    )
    settled = CounterMetricFamily(
        "webhook_settlements",
        "Settlements done, by what they found: voided (no effect: refunded_unfulfilled) or "
        "applied (the effect: fulfilled, then taken back).",
        labels=["outcome"],
    )
    settled.add_metric(["voided"], counts.settled_voided)
    settled.add_metric(["applied"], counts.settled_applied)
    yield settled
    waiting = GaugeMetricFamily(
        "webhook_payments_need_a_person",
        "Payments that wait for a person (failed, interrupted, held), by state and by leg: "
        "fulfil (their fulfilment, or their fulfilment again after a dispute won) or reverse "
        "(their reversal; held: given back after it, a dispute won or a refund failed).",
        labels=["state", "leg"],
    )
    split = needs_a_person(redis)
    for leg, by_state in (("fulfil", split.fulfil), ("reverse", split.reverse)):
        for state, n in by_state.items():
            waiting.add_metric([state, leg], n)
    yield waiting
