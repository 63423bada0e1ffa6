"""The objects of ledger/read/ as ``webhook-ledger`` prints them for people: tables with
ISO-8601 UTC times, amounts by their currency's exponent, totals in captions, secrets by
label; ``--json`` prints the objects themselves instead."""

from collections import Counter
from typing import Any

from rich.table import Table
from rich.text import Text

from ledger import money
from ledger.read.events import Event, EventList
from ledger.read.payment_reasons import not_paid, reason
from ledger.read.payments import Payment, PaymentList, PaymentRow
from ledger.read.rejections import RejectionList
from ledger.read.secrets import SecretList
from ledger.read.stats import Summary
from ledgerctl import (
    render_attempts,
    render_gate,
    render_next,
    render_purchase,
    render_reversal,
)
from ledgerctl.terminal import iso, kv_table, line, literal, rows_table


def summary(s: Summary) -> list[Table]:
    lat, w = s.fulfil_latency, s.workers
    counters: dict[str, Any] = {
        "deliveries": s.deliveries,
        "distinct events": s.events,
        "duplicate deliveries": s.duplicates,
        "conflicting copies": s.conflicts,
        "rejected requests": s.rejected,
        "read from Stripe's API (not delivered)": s.reconciled,
        "fulfilled by a worker": s.effects,
        "attempts started / finished": f"{s.attempts_started:,} / {s.attempts_finished:,}",
    }
    counters |= {f"rejected: {k}": v for k, v in s.rejected_by_reason.items()}
    counters |= {f"verified by secret {k}": v for k, v in _secrets(s)}
    states = {f"payments {k.replace('_', ' ')}": v for k, v in s.payments_by_state.items()}
    total = sum(s.payments_by_state.values())
    work: dict[str, Any] = {
        f"fulfil latency p50 / p90 / p99 (last {lat.window_s // 60} min)": _latency(s),
        "payments in that window": lat.payments,
        "jobs waiting in the queue": w.queue_length,
        "oldest waiting job (s)": w.oldest_queued_age_s,
        "longest queued / retrying payment (s)": (
            f"{s.oldest_waiting_s['queued']:,.1f} / {s.oldest_waiting_s['retrying']:,.1f}"
        ),
        "workers alive (busy)": f"{w.alive} ({w.busy})",
        "worker registrations not alive": w.registered - w.alive,
        "payments due for the sweeper": w.due_for_sweeper,
        "sweeper's last pass": w.sweeper_last_pass_at,
    }
    return [
        kv_table(f"Webhook ledger at {iso(s.at)}", counters),
        kv_table("Payments by state", states, caption=f"{plural(total, 'payment')} in all"),
        render_reversal.counts(s),
        kv_table("Fulfilment and workers", work),
        render_gate.fulfilment(s.fulfilment),
    ]


def _why(p: PaymentRow) -> str | None:
    if p.waiting:
        return f"waiting: {p.waiting}" + (f" (last: {p.last_error})" if p.last_error else "")
    return reason(p)


def _secrets(s: Summary) -> list[tuple[str, int]]:
    return sorted(s.deliveries_by_secret.items())


def _latency(s: Summary) -> str:
    lat = s.fulfil_latency
    if not lat.payments:
        return "-"
    return f"{lat.p50_ms:,} / {lat.p90_ms:,} / {lat.p99_ms:,} ms"


def events(page: EventList) -> Table:
    rows = [
        {
            "event": e.id,
            "type": e.type,
            "deliveries": e.deliveries,
            "origin": e.origin,
            "payment": e.payment_key,
            "secret": e.secret_label,
            "first recorded": e.first_recorded_at,
            "last delivery": e.last_delivered_at,
        }
        for e in page.events
    ]
    delivered = sum(e.deliveries for e in page.events)
    more = "; more with --offset" if len(rows) == page.limit else ""
    caption = f"{plural(len(rows), 'event')} (from #{page.offset + 1}, newest first), "
    caption += f"{plural(delivered, 'delivery', 'deliveries')}{more}"
    columns = tuple(rows[0]) if rows else ("event", "type", "deliveries")
    return rows_table("Events", rows, columns, ("deliveries",), caption)


def event(e: Event) -> list[Any]:
    rows: dict[str, Any] = {
        "type": e.type,
        "deliveries": e.deliveries,
        "first recorded": e.first_recorded_at,
        "last delivery": e.last_delivered_at,
        "recorded from": e.recorded_from,
        "payment": f"{e.payment_key} ({e.role}{', pays it' if e.pays else ''})"
        if e.payment_key
        else None,
        "sources": ", ".join(f"{k} x{v}" for k, v in sorted(e.deliveries_by_source.items())),
        "last verified by secret": e.secret_label,
        "created by Stripe": e.created_at,
        "mode": "live" if e.livemode else "test",
        "API version": e.api_version,
        "payload SHA-256": e.payload_sha256,
    }
    if e.conflicts:
        rows["conflicting copies"] = f"{e.conflicts} (last {e.conflicting_payload_sha256})"
    if e.thin:
        ref = e.related_object
        rows["thin event, refers to"] = f"{ref.type} {ref.id}" if ref else "nothing"
    if e.account:
        rows["connected account"] = e.account
    if e.confirmed_by_reconcile_at:
        rows["confirmed by reconcile"] = e.confirmed_by_reconcile_at
    parts: list[Any] = [kv_table(f"Event {e.id}", rows)]
    if e.payload is not None:
        parts += [line("Payload, as first recorded:"), literal(e.payload)]
    return parts


def payments(page: PaymentList) -> Table:
    rows = [
        {
            "payment": p.payment_key,
            "state": p.state + render_reversal.LEG_SUFFIX[p.leg],
            "since": p.state_since,
            "amount": p.amount.formatted if p.amount else None,
            "deliveries": p.deliveries,
            "attempts": p.attempts_started,
            "paid to fulfilled (ms)": p.paid_to_fulfilled_ms,
            "customer": " ".join(filter(None, (p.client_reference_id, p.customer_email))),
            "why": _why(p),
        }
        for p in page.payments
    ]
    states = Counter(p.state for p in page.payments)
    caption = f"{plural(len(rows), 'payment')}: " + (
        ", ".join(f"{n:,} {s}" for s, n in sorted(states.items())) or "none"
    )
    sums = _amount_totals(page)
    caption += f"; amounts {sums}" if sums else ""
    columns = tuple(rows[0]) if rows else ("payment", "state")
    right = ("amount", "deliveries", "attempts", "paid to fulfilled (ms)")
    return rows_table(
        f"Payments{': ' + page.state if page.state else ''}", rows, columns, right, caption
    )


def _amount_totals(page: PaymentList) -> str:
    by_currency: Counter[str] = Counter()
    for p in page.payments:
        if p.amount:
            by_currency[p.amount.currency] += p.amount.minor_units
    return ", ".join(money.format_minor(n, c) for c, n in sorted(by_currency.items()))


def payment(p: Payment, reverses: bool) -> list[Table | Text]:
    """``webhook-ledger payment``'s tables (``reverses``: REVERSAL_ACTION is set)."""
    facts: dict[str, Any] = {
        "state": f"{p.state} since {iso(p.state_since)}",
        "amount": p.amount.formatted if p.amount else None,
        "deliveries": p.deliveries,
        "paid by": f"{p.paid_by} at {iso(p.paid_at)}" if p.paid_by else not_paid(p),
        "attempts started / finished": f"{p.attempts_started} / {p.attempts_finished}"
        + render_attempts.ended(p.attempts),
        "fulfilled": p.fulfilled_at,
        "paid to fulfilled (ms)": p.paid_to_fulfilled_ms,
    }
    optional = {
        "held" if p.state == "held" else "was held": p.hold_reason,
        "waiting (no attempt spent)": p.waiting,
        "last error": p.last_error,
        "connected account": p.account,
        "same purchase as": p.same_purchase_as,
        "next attempt": p.next_attempt_at,
        "lease until": p.lease_until,
        "receipt": render_reversal.receipt(p.receipt),
    }
    facts |= {k: v for k, v in optional.items() if v}
    if p.resolution:
        r = p.resolution
        decided = (
            f": {r.meant or r.decision} (was {r.from_state}) at {iso(r.at)}" if r.decision else ""
        )
        facts["decided by a person"] = r.by + decided
    if p.downstream:
        d = p.downstream
        facts["downstream's own record"] = (
            f"calls {d.calls} (applied {d.applied}, already applied {d.already_applied}), "
            f"effects {d.effects}"
        ) + (f", reversals {d.reversals} ({d.reversal_calls} calls)" if d.reversal_calls else "")
        facts["downstream's own record"] += f", re-grants {d.regrants}" if d.regrants else ""
    timeline = [
        {
            "event": e.id,
            "type": "(record expired)" if e.expired else e.type,
            "role": "paid it"
            if e.paid_the_payment
            else "paid (after the one that paid it)"
            if e.pays
            else e.role,
            "deliveries": e.deliveries,
            "first recorded": e.first_recorded_at,
            "last delivery": e.last_delivered_at,
        }
        for e in p.events
    ]
    attempts = render_attempts.rows(p)
    return [
        kv_table(f"Payment {p.payment_key}", facts),
        *render_reversal.taken_back(p),
        *render_purchase.purchase(p.purchase, p.came_after_fulfilment),
        rows_table(
            "Events, in the order first recorded",
            timeline,
            tuple(timeline[0]) if timeline else ("event",),
            ("deliveries",),
        ),
        rows_table(
            "Attempts",
            attempts,
            tuple(attempts[0]) if attempts else ("token", "outcome"),
            ("token", "took (ms)", "call (ms)"),
        ),
        *render_next.lines(p, reverses),
    ]


def plural(n: int, one: str, many: str = "") -> str:
    """'1 payment', '2 payments'; '1 delivery', '2 deliveries' (``many`` given)."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def rejections(page: RejectionList) -> Table:
    rows = [
        {
            "at": r.at,
            "reason": r.reason,
            "status": r.status,
            "bytes": r.size,
            "remote": r.remote,
            "body SHA-256": r.body_sha256,
        }
        for r in page.rejections
    ]
    reasons = Counter(r.reason for r in page.rejections)
    caption = f"{len(rows):,} latest: " + (
        ", ".join(f"{n:,} {r}" for r, n in reasons.most_common()) or "none"
    )
    columns = ("at", "reason", "status", "bytes", "remote", "body SHA-256")
    return rows_table("Rejections (never the body)", rows, columns, ("status", "bytes"), caption)


def secrets(found: SecretList) -> Table:
    rows = [
        {
            "secret": s.label,
            "configured": s.configured,
            "deliveries verified": s.deliveries,
            "last": s.last_seen_at,
            "status": s.status.replace("_", " "),
        }
        for s in found.secrets
    ]
    title = f"Secrets (safe to retire after {found.retire_after_days} days unused)"
    total = sum(s.deliveries for s in found.secrets)
    columns = ("secret", "configured", "deliveries verified", "last", "status")
    caption = plural(total, "delivery", "deliveries")
    return rows_table(title, rows, columns, ("deliveries verified",), caption)
