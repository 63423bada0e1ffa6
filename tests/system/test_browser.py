"""The dashboard in a real browser (Debian's Chromium driven by Playwright) after a replay
run: the overview, an event, a payment and the needs-a-person page, on a wide screen and on
a phone, read as a person would (times in the browser's zone with the zone named, amounts
in units, a timeline per payment, a legend, no request that fails). The screenshots are
kept in tests/output/ (the README's is the overview at 1400x1000)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import Page, sync_playwright

from ledger import keys, settings
from ledger.read import stats
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
VIEWPORTS = {"wide": (1400, 1000), "phone": (390, 844)}
ZONE = "Asia/Tokyo"  # not the machine's: the page must show the browser's zone, named
LOCAL_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d GMT\+9$")


def number(page: Page, selector: str) -> int:
    return int(re.sub(r"\D", "", page.inner_text(selector)))


@pytest.fixture
def browser() -> Any:
    assert Path(CHROMIUM).exists(), "chromium missing: scripts/test.sh installs it"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield browser
        browser.close()


def open_page(browser: Any, viewport: tuple[int, int], failed: list[str]) -> Page:
    """A page signed in, in ZONE, that notes every request answered 4xx/5xx in ``failed``."""
    width, height = viewport
    context = browser.new_context(
        http_credentials={"username": "ops", "password": OPS_TOKEN},
        viewport={"width": width, "height": height},
        timezone_id=ZONE,
        locale="en-US",
    )
    page = context.new_page()
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    return page


def shoot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def fits(page: Page) -> bool:
    """Nothing wider than the window but what scrolls inside its own box (wide tables)."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def replay(web_url: str, env: dict[str, str]) -> None:
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "replay_events.py"),
            "--url",
            f"{web_url}/webhooks/stripe",
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
        env=env,
        check=True,
        timeout=120,
    )


def test_dashboard_pages_read_without_a_decoder(stack, redis, config, rng, browser) -> None:
    s = stack()
    web = s.start_web()
    waiting = {}
    for state in ("interrupted", "failed"):  # for the needs-a-person page: before any worker
        event, body = paid_event(rng)
        assert s.send(body).ok
        fail_payment(redis, config, payment_key_of(event), state)
        waiting[payment_key_of(event)] = state
    s.start_worker()
    s.start_sweeper()
    replay(web.url, s.env)
    wait_until(lambda: stats.counters(redis).payments_by_state["fulfilled"] == 5)
    summary = stats.summary(redis, settings.load({}))
    failed: list[str] = []
    for name, viewport in VIEWPORTS.items():
        page = open_page(browser, viewport, failed)
        overview(page, web.url, summary, name, redis)
        event_page(page, redis, name)
        payment_page(page, name)
        attention_page(page, web.url, waiting, name)
        page.context.close()
    assert failed == [], failed  # the favicon included


def overview(page: Page, url: str, summary: Any, name: str, redis: Any) -> None:
    page.goto(f"{url}/ops/")
    # The browser's first request to a new context carries no password: its 401 is counted.
    challenges = int(redis.hget(keys.STATS, "rejected:unauthorized") or 0)
    assert challenges >= 1
    for counter in ("deliveries", "events", "duplicates", "effects"):
        assert number(page, f"#total-{counter}") == getattr(summary, counter), counter
    assert number(page, "#total-rejected") == summary.rejected + challenges
    assert number(page, "#payments-fulfilled") == summary.payments_by_state["fulfilled"] == 5
    # the replay's 40 (20 events, 2 copies each) and the 2 left to a person
    assert number(page, "#total-deliveries") == 42 and summary.rejected == 2
    assert "log scale" in page.inner_text("#chart") and page.locator("#chart rect").count() >= 1
    assert "delivered more than once" in page.inner_text("#legend")
    assert "GMT+9" in page.inner_text("header .zone")
    times = page.locator("#latest-events time").all_inner_texts()
    assert times and all(LOCAL_TIME.match(t) for t in times), times
    assert number(page, "#workers-alive") >= 1
    assert fits(page)
    if name == "wide":
        main = page.evaluate("document.querySelector('main').getBoundingClientRect().width")
        assert main > 1300, main  # the content uses the window's width
    shoot(page, f"overview-{name}")


def event_page(page: Page, redis: Any, name: str) -> None:
    page.click("#latest-events a >> nth=0")
    page.wait_for_selector("#event-deliveries")
    event_id = page.inner_text("h1 code")
    assert number(page, "#event-deliveries") == int(redis.hget(f"wl:evt:{event_id}", "n")) == 2
    assert f'"id": "{event_id}"' in page.inner_text("pre")
    assert LOCAL_TIME.match(page.locator("#event time").first.inner_text())
    assert fits(page)
    shoot(page, f"event-{name}")


def payment_page(page: Page, name: str) -> None:
    page.click("#event a >> nth=0")
    page.wait_for_selector("#payment-state")
    assert page.inner_text("#payment-state") == "fulfilled"
    amount = page.inner_text("#payment-amount")
    assert re.fullmatch(r"[\d,]+\.\d\d USD", amount), amount
    assert "effects 1" in page.inner_text("#downstream")
    events = page.locator("#payment-events tr").all_inner_texts()
    assert len(events) >= 2 and any("paid it" in row for row in events), events
    attempts = page.inner_text("#attempts")
    assert "fulfilled" in attempts and " ms" in attempts
    assert fits(page)
    shoot(page, f"payment-{name}")


def attention_page(page: Page, url: str, waiting: dict[str, str], name: str) -> None:
    page.goto(f"{url}/ops/")
    page.click("header >> text=Needs a person")
    page.wait_for_selector("#payments")
    rows = page.locator("#payments tr").all_inner_texts()[1:]
    assert len(rows) == len(waiting), rows
    for pk, state in waiting.items():
        row = next(r for r in rows if pk in r)
        assert state in row and re.search(r"[\d,]+\.\d\d USD", row), row
        assert "GMT+9" in row
    assert any("http 400: bad request" in r for r in rows)
    assert fits(page)
    shoot(page, f"needs-a-person-{name}")


def test_dashboard_shows_a_refused_decision_and_why(stack, redis, config, rng, browser) -> None:
    """ "Run again" on an interrupted payment whose call may still be running is refused, and
    the page says so (it used to answer 303 back to the page with no message)."""
    web = stack().start_web()
    event, body = paid_event(rng)
    assert requests.post(
        f"{web.url}/webhooks/stripe", data=body, headers=signed_headers(body), timeout=10
    ).ok
    pk = payment_key_of(event)
    fail_payment(redis, config, pk, "interrupted")  # its call started just now

    page = open_page(browser, VIEWPORTS["wide"], [])
    page.goto(f"{web.url}/ops/payments/{pk}")
    page.click("text=It was not: run again")
    page.wait_for_selector("#refusal", timeout=10_000)
    refusal = page.inner_text("#refusal")
    assert "attempt_may_still_be_running" in refusal and "may still be running" in refusal
    assert "GMT+9" in refusal  # until when, in the browser's zone
    assert page.inner_text("#payment-state") == "interrupted"
    assert redis.hget(f"wl:pay:{pk}", "state") == b"interrupted"
    shoot(page, "refused-wide")
