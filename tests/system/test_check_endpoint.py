"""``webhook-ledger check-endpoint`` as a user runs it (the installed entry point, its own
process) against the suite's stand-in of Stripe's API: the endpoint's ``enabled_events``
against what the settings need (ledger/subscriptions.py), every page read, one line and no
secret when the API refuses the key, does not answer or redirects."""

import json
import os
import subprocess
from collections.abc import Iterator

import pytest

from ledger.subscriptions import REFUND_TYPES
from tests.support.processes import BIN, ROOT, free_port
from tests.support.stripe_api import API_KEY, EventsApi

URL = "https://pay.example.com/webhooks/stripe"
REVERSAL = {"REVERSAL_ACTION": "sqlite:///var/unused.sqlite3"}
WRONG_KEY = "sk_test_wrongwrongwrong0123456789"


@pytest.fixture
def api() -> Iterator[EventsApi]:
    standin = EventsApi().start()
    try:
        yield standin
    finally:
        standin.stop()


def webhook_ledger(
    base: str, *args: str, key: str = API_KEY, **settings: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRIPE_", "REVERSAL_"))}
    env |= {"STRIPE_API_KEY": key, "STRIPE_API_BASE": base, "COLUMNS": "200", **settings}
    return subprocess.run(
        [str(BIN / "webhook-ledger"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def event_types(**settings: str) -> list[str]:
    """What ``webhook-ledger event-types`` prints with these settings: the list to select."""
    done = webhook_ledger("https://api.stripe.com", "event-types", **settings)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_types_event_types_prints_pass_and_reversal_needs_the_refund_types(api) -> None:
    api.add_endpoint(URL, event_types())
    plain = webhook_ledger(api.url, "check-endpoint")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "ok: sends every type these settings need" in plain.stdout
    reversing = webhook_ledger(api.url, "check-endpoint", **REVERSAL)
    assert reversing.returncode == 1
    said = reversing.stdout.splitlines()
    missing = [line.split()[1] for line in said if line.startswith("missing")]
    assert missing == [t for t in REFUND_TYPES if t != "charge.refunded"]
    assert "REVERSAL_ACTION is set" in reversing.stdout
    api.webhook_endpoints.clear()
    api.add_endpoint(URL, event_types(**REVERSAL))
    assert webhook_ledger(api.url, "check-endpoint", **REVERSAL).returncode == 0


def test_the_paid_types_the_settings_fulfil_on_are_needed(api) -> None:
    api.add_endpoint(URL, ["checkout.session.completed", "charge.refunded"])
    done = webhook_ledger(api.url, "check-endpoint", "--json")
    assert done.returncode == 1
    verdict = json.loads(done.stdout)
    assert "payment_intent.succeeded" in verdict["missing"] and not verdict["ok"]
    assert "checkout.session.completed" not in verdict["missing"]
    narrowed = {"PAID_EVENT_TYPES": "checkout.session.completed"}
    again = webhook_ledger(api.url, "check-endpoint", "--json", **narrowed)
    assert again.returncode == 0 and json.loads(again.stdout)["missing"] == {}
    assert "payment_intent.succeeded" in json.loads(again.stdout)["unsent"]
    thin = {"PAID_EVENT_TYPES": "checkout.session.completed,v1.payment_intent.succeeded"}
    noted = webhook_ledger(api.url, "check-endpoint", **thin)
    assert noted.returncode == 0 and "not checked (thin" in noted.stdout


def test_an_endpoint_sending_every_type_passes(api) -> None:
    api.add_endpoint(URL, ["*"])
    done = webhook_ledger(api.url, "check-endpoint", **REVERSAL)
    assert done.returncode == 0 and "every type (*)" in done.stdout


def test_every_page_is_read_and_the_url_picks_the_endpoint(api) -> None:
    for n in range(150):
        api.add_endpoint(f"https://shop{n}.example.com/hooks", ["payment_intent.succeeded"])
    api.add_endpoint(URL, event_types(**REVERSAL))
    several = webhook_ledger(api.url, "check-endpoint")
    assert several.returncode == 2 and "151 webhook endpoints" in several.stderr
    assert "--url" in several.stderr
    api.endpoint_pages = 0
    done = webhook_ledger(api.url, "check-endpoint", "--url", URL, **REVERSAL)
    assert done.returncode == 0, done.stdout
    assert api.endpoint_pages == 2  # 100, then 51
    unknown = webhook_ledger(api.url, "check-endpoint", "--url", "https://elsewhere.test/x")
    assert unknown.returncode == 1 and "No webhook endpoint at" in unknown.stdout


def test_a_disabled_endpoint_or_none_fails(api) -> None:
    none = webhook_ledger(api.url, "check-endpoint")
    assert none.returncode == 1 and "No webhook endpoint" in none.stdout
    api.add_endpoint(URL, ["*"], status="disabled")
    done = webhook_ledger(api.url, "check-endpoint")
    assert done.returncode == 1 and "disabled: Stripe sends it nothing" in done.stdout


def test_a_wrong_key_is_one_line_without_the_key(api) -> None:
    api.add_endpoint(URL, ["*"])
    done = webhook_ledger(api.url, "check-endpoint", key=WRONG_KEY)
    assert done.returncode == 4
    said = (done.stdout + done.stderr).strip()
    assert len(said.splitlines()) == 1, said
    assert "(401)" in said and "sk_test_***" in said
    assert "wrongwrong" not in said and API_KEY not in said


def test_a_key_without_the_permission_is_one_line(api) -> None:
    api.forbidden = True
    done = webhook_ledger(api.url, "check-endpoint", key=API_KEY)
    said = (done.stdout + done.stderr).strip()
    assert done.returncode == 4 and len(said.splitlines()) == 1, said
    assert "(403)" in said and "read access to Webhook Endpoints" in said
    assert "rk_test_***" in said and API_KEY not in said


def test_no_answer_is_one_line(api) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = webhook_ledger(nobody, "check-endpoint")
    said = (done.stdout + done.stderr).strip()
    assert done.returncode == 4 and len(said.splitlines()) == 1, said
    assert f"no answer from {nobody}" in said and API_KEY not in said


def test_a_redirect_is_not_followed(api) -> None:
    elsewhere = EventsApi().start()
    try:
        elsewhere.add_endpoint(URL, ["*"])
        api.redirect_to = elsewhere.url
        done = webhook_ledger(api.url, "check-endpoint")
    finally:
        elsewhere.stop()
    said = (done.stdout + done.stderr).strip()
    assert done.returncode == 4 and len(said.splitlines()) == 1, said
    assert "302, a redirect: not followed" in said
    assert elsewhere.requests_seen == 0  # the key never went where Location pointed
