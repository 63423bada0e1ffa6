"""What a payment bought, for people (``webhook-ledger payment``): the purchase as the ledger
holds it now, with the line items when they were fetched, and an invoice's lines (saying so
when they are only the first of them); under it, each part that came after the call that
fulfilled it (ledger/read/late_parts.py), which that call did not have. The email, name,
phone and addresses are shown whole here, on one payment's page; lists show a masked email
and no address (ledger/redact.py ``mask_email``)."""

from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from ledger.purchase import CustomField, Purchase
from ledger.purchase_invoice import LinePeriod
from ledger.purchase_shipping import address_text
from ledger.read.late_parts import LatePart
from ledgerctl.terminal import kv_table, rows_table


def _metadata(found: dict[str, str] | None) -> str | None:
    return ", ".join(f"{k}={v}" for k, v in sorted(found.items())) if found else None


def _custom_fields(fields: list[CustomField]) -> str | None:
    shown = [f"{f.key}={'(empty)' if f.value is None else f.value}" for f in fields]
    return ", ".join(shown) or None


def _period(period: LinePeriod | None) -> str | None:
    if period is None:
        return None
    start, end = (
        datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%d") for s in (period.start, period.end)
    )
    return f"{start} – {end}"


def purchase(p: Purchase, late: list[LatePart]) -> list[Table]:
    session, invoice, ship = p.checkout_session, p.invoice, p.shipping
    details = session.customer_details if session else None
    facts: dict[str, Any] = {
        "checkout session": session.id if session else None,
        "client reference id": p.client_reference_id,
        "session": f"{session.mode} mode, {session.payment_status}" if session else None,
        "payment link": session.payment_link if session else None,
        "custom fields": _custom_fields(session.custom_fields) if session else None,
        "customer": p.customer,
        "email": p.customer_email,
        "name": p.customer_name,
        "phone": details.phone if details else None,
        "address": address_text(details.address) if details else None,
        "ship to": " · ".join(filter(None, (ship.name, ship.phone, address_text(ship.address))))
        if ship
        else None,
        "charge": p.charge,
        "invoice": f"{invoice.id} ({invoice.billing_reason})" if invoice else None,
        "subscription": p.subscription,
        "paid by": f"{p.paid_by.event_id} ({p.paid_by.type})" if p.paid_by.event_id else None,
        "metadata of the payment intent": _metadata(p.metadata.payment_intent),
        "metadata of the session": _metadata(p.metadata.checkout_session),
        "metadata of the invoice": _metadata(p.metadata.invoice),
    }
    shown = {k: v for k, v in facts.items() if v}
    tables = [kv_table("What was bought", shown, late_lines(late), caption_left=True)]
    items = [
        {
            "price": i.price,
            "product": i.product,
            "quantity": i.quantity,
            "unit amount": i.unit_amount,
            "total": i.amount_total,
            "description": i.description,
        }
        for i in p.line_items or []
    ]
    if items:
        tables.append(
            rows_table("Line items", items, tuple(items[0]), ("quantity", "unit amount", "total"))
        )
    lines = [
        {
            "price": i.price,
            "product": i.product,
            "quantity": i.quantity,
            "amount": i.amount,
            "period": _period(i.period),
            "metadata": _metadata(i.metadata),
            "description": i.description,
        }
        for i in (invoice.lines if invoice else [])
    ]
    if lines and invoice:
        title = "Invoice lines" if invoice.lines_complete else lines_left_out(len(lines))
        tables.append(rows_table(title, lines, tuple(lines[0]), ("quantity", "amount")))
    return tables


def lines_left_out(shown: int) -> str:
    """The title of an invoice's lines when its event left some out."""
    return (
        f"Invoice lines: the first {shown} of more"
        " (its event left the rest out; INVOICE_LINES reads every line)"
    )


def late_lines(late: list[LatePart]) -> str | None:
    """Under what was bought: each part its fulfilling call did not have, with its event."""
    return (
        "\n".join(
            f"{n.note}: {n.event_type} {n.event_id} first recorded {_ms(n.first_recorded_at)},"
            f" after attempt {n.fulfilled_by} started {_ms(n.call_started_at)}"
            for n in late
        )
        or None
    )


def _ms(moment: datetime) -> str:
    """ISO-8601 UTC to the millisecond: the two times are often within one second."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
