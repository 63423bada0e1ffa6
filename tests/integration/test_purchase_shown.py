"""People see what was bought (issue 40, requirement 5): a payment's own page shows its
purchase in the dashboard, the API, ``webhook-ledger payment`` and the evidence bundle;
lists show the order id and a masked email, never a whole one, nor where it ships."""

import json
from pathlib import Path

from ledger.redact import mask_email
from tests.support.constants import BASIC, BEARER
from tests.support.helpers import payment_key_of, run_cli
from tests.support.inprocess import Fulfilment
from tests.support.purchases import EMAIL, NAME, ORDER, checkout_purchase

MASKED = "j***@example.com"
STREET = "510 Townsend St"
"""Where the sample payment's PaymentIntent ships to."""
PHONE = "+15555550100"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stripe"


def recorded(fulfilment, rng) -> tuple[str, str]:
    """A Checkout purchase recorded (not fulfilled); its payment key and session id."""
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    events[3]["data"]["object"]["customer_details"]["phone"] = PHONE
    for event in events:
        f.deliver(event)
    return payment_key_of(events[2]), events[3]["data"]["object"]["id"]


def test_mask_email() -> None:
    assert mask_email(EMAIL) == MASKED
    assert (mask_email(None), mask_email(""), mask_email("nobody"), mask_email("@x")) == (
        None,
        None,
        "***",
        "***",
    )


def test_the_api_shows_the_purchase_and_masks_the_list(fulfilment, client, rng) -> None:
    pk, session = recorded(fulfilment, rng)
    one = client.get(f"/ops/api/payments/{pk}", headers=BEARER).get_json()
    assert one["purchase"]["checkout_session_id"] == session
    assert (one["purchase"]["customer_email"], one["purchase"]["customer_name"]) == (EMAIL, NAME)
    assert one["purchase"]["shipping"]["address"]["line1"] == STREET
    assert one["purchase"]["checkout_session"]["customer_details"]["phone"] == PHONE
    assert (one["client_reference_id"], one["customer_email"]) == (ORDER, MASKED)
    listed = client.get("/ops/api/payments", headers=BEARER)
    [row] = listed.get_json()["payments"]
    assert (row["client_reference_id"], row["customer_email"]) == (ORDER, MASKED)
    assert EMAIL.encode() not in listed.data and NAME.encode() not in listed.data
    assert STREET.encode() not in listed.data and PHONE.encode() not in listed.data


def test_the_dashboard_shows_the_purchase_and_masks_the_list(fulfilment, client, rng) -> None:
    pk, session = recorded(fulfilment, rng)
    page = client.get(f"/ops/payments/{pk}", headers=BASIC).get_data(as_text=True)
    assert session in page and ORDER in page and EMAIL in page and NAME in page
    assert STREET in page and PHONE in page
    listed = client.get("/ops/payments", headers=BASIC).get_data(as_text=True)
    assert ORDER in listed and MASKED in listed
    assert EMAIL not in listed and NAME not in listed
    assert STREET not in listed and PHONE not in listed


def test_the_cli_and_the_bundle_show_the_purchase(fulfilment, config, rng, tmp_path) -> None:
    pk, session = recorded(fulfilment, rng)
    shown = run_cli(config, "payment", pk)
    assert shown.exit_code == 0
    assert all(s in shown.stdout for s in (session, ORDER, EMAIL, NAME, STREET, PHONE)), (
        shown.stdout
    )
    listed = run_cli(config, "payments")
    assert listed.exit_code == 0 and MASKED in listed.stdout and EMAIL not in listed.stdout
    assert STREET not in listed.stdout and PHONE not in listed.stdout
    as_json = json.loads(run_cli(config, "payment", pk, "--json").stdout)
    assert as_json["purchase"]["client_reference_id"] == ORDER
    assert run_cli(config, "export", str(tmp_path / "b")).exit_code == 0
    [bundled] = json.loads((tmp_path / "b" / "payments.json").read_text())
    assert bundled["purchase"]["checkout_session_id"] == session
    assert bundled["purchase"]["shipping"]["address"]["line1"] == STREET
    assert run_cli(config, "verify", str(tmp_path / "b")).exit_code == 0


def test_what_the_customer_typed_and_a_subscription_s_lines_are_shown(
    fulfilment, client, config, rng
) -> None:
    """A session's payment link and custom fields, an invoice's lines with their period and
    metadata: on the payment's page and in ``webhook-ledger payment``, as the action gets them."""
    f: Fulfilment = fulfilment()
    events = checkout_purchase(rng)
    session = events[3]["data"]["object"]
    session["payment_link"] = "plink_1Q2w3E"
    session["custom_fields"] = [
        {"key": "engraving", "type": "text", "text": {"value": "For Jenny"}, "optional": False}
    ]
    for event in events:
        f.deliver(event)
    pk = payment_key_of(events[2])
    page = client.get(f"/ops/payments/{pk}", headers=BASIC).get_data(as_text=True)
    assert "plink_1Q2w3E" in page and "For Jenny" in page
    shown = run_cli(config, "payment", pk).stdout
    assert "plink_1Q2w3E" in shown and "engraving=For Jenny" in shown, shown
    invoice = json.loads((FIXTURES / "invoice.paid.subscription_cycle.json").read_text())
    f.deliver(invoice)
    key = invoice["data"]["object"]["id"]
    page = client.get(f"/ops/payments/{key}", headers=BASIC).get_data(as_text=True)
    assert 'id="invoice-lines"' in page and "project_id" in page
    assert '<time datetime="2022-01-20T02:21:20Z">' in page  # the line's period start
    shown = run_cli(config, "payment", key).stdout
    assert "Invoice lines" in shown and "2022-01-20 – 2022-02-20" in shown, shown
    assert "project_id=295" in " ".join(shown.split())


def test_lines_the_event_left_out_are_said_to_be_the_first_only(
    fulfilment, client, config, rng
) -> None:
    """An invoice whose event carried its first lines only (``has_more``), not read from
    Stripe's API (INVOICE_LINES): the page and ``webhook-ledger payment`` say so."""
    f: Fulfilment = fulfilment()
    invoice = json.loads((FIXTURES / "invoice.paid.subscription_cycle.json").read_text())
    invoice["data"]["object"]["lines"]["has_more"] = True
    f.deliver(invoice)
    key = invoice["data"]["object"]["id"]
    page = client.get(f"/ops/payments/{key}", headers=BASIC).get_data(as_text=True)
    assert 'id="invoice-lines-left-out"' in page and "the first 1 of more" in page
    shown = " ".join(run_cli(config, "payment", key).stdout.split())
    assert "Invoice lines: the first 1 of more" in shown, shown
    invoice["data"]["object"]["lines"]["has_more"] = False  # the paying event's own lines
    f.deliver({**invoice, "id": "evt_again_all_lines"})
    page = client.get(f"/ops/payments/{key}", headers=BASIC).get_data(as_text=True)
    assert 'id="invoice-lines-left-out"' not in page and 'id="invoice-lines"' in page
