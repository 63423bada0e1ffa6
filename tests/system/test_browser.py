"""The dashboard in a real browser (Debian's Chromium driven by Playwright) after a replay run."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from playwright.sync_api import sync_playwright

from ledger import queries
from tests.support.constants import OPS_TOKEN, SECRET
from tests.support.helpers import fail_payment, paid_event, payment_key_of, signed_headers
from tests.support.processes import ROOT, wait_until

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).parents[1] / "output"


def number(page, selector: str) -> int:
    return int(re.sub(r"\D", "", page.inner_text(selector)))


@pytest.fixture
def browser_context(tmp_path):
    assert Path(CHROMIUM).exists(), "chromium missing: scripts/test.sh installs it"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        context = browser.new_context(
            http_credentials={"username": "ops", "password": OPS_TOKEN},
            viewport={"width": 1300, "height": 1000},
        )
        yield context
        context.close()
        browser.close()


def test_dashboard_shows_the_ledger_after_a_replay(stack, redis, browser_context, tmp_path) -> None:
    s = stack()
    web = s.start_web()
    s.start_worker()
    s.start_sweeper()
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "replay_events.py"),
            "--url",
            f"{web.url}/webhooks/stripe",
            "--secret",
            SECRET,
            "--generate",
            "5",
            "--checkout",
            "--copies",
            "2",
            "--bad-signature",
            "2",
            "--seed",
            "5",
            "--expect-once",
            "--quiet",
        ],
        env=s.env,
        check=True,
        timeout=120,
    )
    wait_until(lambda: queries.summary(redis, "fulfilment")["payments"]["fulfilled"] == 5)
    summary = queries.summary(redis, "fulfilment")

    page = browser_context.new_page()
    page.goto(f"{web.url}/ops/")
    for name in ("deliveries", "events", "duplicates", "rejected", "effects"):
        assert number(page, f"#total-{name}") == summary[name], name
    assert number(page, "#payments-fulfilled") == summary["payments"]["fulfilled"] == 5
    assert number(page, "#total-deliveries") == 40 and number(page, "#total-rejected") == 2
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
    page.screenshot(path=str(SCREENSHOTS / "dashboard.png"), full_page=True)

    page.click("#latest-events a >> nth=0")
    page.wait_for_selector("#event-deliveries")
    event_id = page.inner_text("h1 code")
    assert number(page, "#event-deliveries") == int(queries.event(redis, event_id)["n"]) == 2
    assert f'"id": "{event_id}"' in page.inner_text("pre")
    page.screenshot(path=str(tmp_path / "event.png"))

    page.click("#event a >> nth=0")
    page.wait_for_selector("#payment-state")
    assert page.inner_text("#payment-state") == "fulfilled"
    assert "effects 1" in page.inner_text("#downstream")
    page.screenshot(path=str(tmp_path / "payment.png"), full_page=True)
    assert (tmp_path / "payment.png").stat().st_size > 10_000


def test_dashboard_shows_a_refused_decision_and_why(
    stack, redis, config, rng, browser_context, tmp_path
) -> None:
    """ "Run again" on an interrupted payment whose call may still be running is refused, and
    the page says so (it used to answer 303 back to the page with no message)."""
    web = stack().start_web()
    event, body = paid_event(rng)
    assert requests.post(
        f"{web.url}/webhooks/stripe", data=body, headers=signed_headers(body), timeout=10
    ).ok
    pk = payment_key_of(event)
    fail_payment(redis, config, pk, "interrupted")  # its call started just now

    page = browser_context.new_page()
    page.goto(f"{web.url}/ops/payments/{pk}")
    page.click("text=It was not: run again")
    page.wait_for_selector("#refusal", timeout=10_000)
    refusal = page.inner_text("#refusal")
    assert "attempt_may_still_be_running" in refusal and "may still be running" in refusal
    assert page.inner_text("#payment-state") == "interrupted"
    assert queries.payment(redis, pk)["state"] == "interrupted"
    page.screenshot(path=str(tmp_path / "refused.png"), full_page=True)
