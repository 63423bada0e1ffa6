"""The evidence bundle's rules for what refunds and disputes took back (docs/REVERSAL.md):
every reversal belongs to an effect, no reversal key is recorded twice, and a payment
refunded before its fulfilment has no effect. Checked on the ledger's payments and, with
the built-in SQLite downstream, on its own tables (orders, calls, reversals, reversal
calls). A reversal is named by its key (``reverse:{payment_key}``, or
``reverse:{payment_key}:{refund_id}`` for one refund), so the rule against two reversals
holds however many a payment may have (each key once). An order under a fulfilment again's
key (``refulfil:{payment_key}``, after a dispute won) is a re-grant, not a second effect: it
follows a reversal of its payment (bundle.py allows one, on top of the effect)."""

from collections import Counter
from typing import Any

from ledger.reversals import is_refulfil_key
from ledgerctl.verification import Verification


def check_reversals(v: Verification, data: dict[str, Any]) -> None:
    payments = data.get("payments.json")
    if payments is not None:
        with v.records("payments.json"):
            for p in payments:
                _check_payment(v, p)
    orders = data.get("downstream_orders.json")
    reversals = data.get("downstream_reversals.json")
    if orders is None or reversals is None:
        return
    with v.records("downstream_reversals.json"):
        _check_downstream(v, orders, reversals, data.get("downstream_reversal_calls.json"))
    if payments is not None:
        with v.records("payments.json and downstream_orders.json"):
            effects = Counter(o["payment_key"] for o in orders)
            for p in payments:
                if p["state"] == "refunded_unfulfilled":
                    pk = p["payment_key"]
                    v.expect(
                        effects[pk] == 0,
                        f"payment {pk}: refunded_unfulfilled but the downstream holds "
                        f"{effects[pk]} effect(s)",
                    )


def _check_payment(v: Verification, p: dict[str, Any]) -> None:
    """A reversed payment had its effect first; one refunded before its fulfilment has none."""
    pk, reversal = p["payment_key"], p.get("reversal") or {}
    if p["state"] == "reversed" or reversal.get("reversed_at"):
        v.expect(
            p["fulfilled_at"] is not None and p["receipt"] is not None,
            f"payment {pk}: reversed without an effect (no fulfilment receipt before it)",
        )
    if p["state"] == "refunded_unfulfilled":
        applied = [a["token"] for a in p["attempts"] if a["outcome"] == "fulfilled"]
        v.expect(
            p["fulfilled_at"] is None and p["receipt"] is None and not applied,
            f"payment {pk}: refunded_unfulfilled but it has an effect",
        )
        v.expect(
            not reversal.get("reversed_at"),
            f"payment {pk}: refunded_unfulfilled but it was reversed",
        )


def _check_downstream(
    v: Verification,
    orders: list[dict[str, Any]],
    reversals: list[dict[str, Any]],
    calls: list[dict[str, Any]] | None,
) -> None:
    """Each reversal key once and for a payment with an order; an order marked reversed has
    its reversal; one applied reversal call per reversal key."""
    ordered = {
        o["payment_key"] for o in orders if not is_refulfil_key(o.get("idempotency_key") or "")
    }
    recorded = Counter(r["idempotency_key"] for r in reversals)
    for key, n in sorted(recorded.items()):
        v.expect(n == 1, f"reversal key {key} recorded {n} times")
    per_payment = Counter(r["payment_key"] for r in reversals)
    for r in reversals:
        v.expect(
            r["payment_key"] in ordered,
            f"reversal {r['idempotency_key']}: payment {r['payment_key']} has no effect "
            "(no order) to take back",
        )
    for o in orders:
        if is_refulfil_key(o.get("idempotency_key") or ""):
            v.expect(
                per_payment[o["payment_key"]] > 0,
                f"order {o['idempotency_key']}: fulfilled again without a reversal before it",
            )
        if o.get("reversed_at") is not None:
            v.expect(
                per_payment[o["payment_key"]] > 0,
                f"order {o['idempotency_key']} marked reversed without a reversal key",
            )
    if calls is None:
        return
    applied = Counter(c["payment_key"] for c in calls if c["outcome"] == "applied")
    for pk in sorted(set(applied) | set(per_payment)):
        v.expect(
            applied[pk] == len({r["idempotency_key"] for r in reversals if r["payment_key"] == pk}),
            f"payment {pk}: {applied[pk]} applied reversal calls, "
            f"{per_payment[pk]} reversal key(s)",
        )
