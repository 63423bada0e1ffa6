"""The ops surface: API routes, dashboard pages, tokens, CSRF, CLI commands, /metrics."""

import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml

from ledger import keys, money
from ledger import settings as settings_module
from ledger.health import WAITING_STATES, health
from ledger.read import stats
from tests.support.constants import BASIC, BEARER, OLD_SECRET, OPS_TOKEN, SECRET
from tests.support.helpers import fail_payment, paid_event, run_cli, signed_headers, state_of
from webhook.http import csrf_token

API_ROUTES = [
    "summary",
    "events",
    "payments",
    "rejections",
    "series",
    "secrets",
    "reconcile",
    "openapi.yaml",
]


def deliver(client, rng, copies: int = 1) -> dict:
    event, body = paid_event(rng)
    for _ in range(copies):
        assert (
            client.post("/webhooks/stripe", data=body, headers=signed_headers(body)).status_code
            == 200
        )
    return event


@pytest.mark.parametrize("route", API_ROUTES)
def test_api_routes_need_the_token(client, redis, route: str) -> None:
    assert client.get(f"/ops/api/{route}").status_code == 401
    assert (
        client.get(f"/ops/api/{route}", headers={"Authorization": "Bearer nope"}).status_code == 401
    )
    assert client.get(f"/ops/api/{route}", headers=BEARER).status_code == 200
    assert client.get(f"/ops/api/{route}", headers=BASIC).status_code == 200


@pytest.mark.parametrize(
    "page",
    ["/ops/", "/ops/events", "/ops/payments", "/ops/payments?state=failed", "/ops/fulfilment"],
)
def test_dashboard_pages_need_the_token(client, redis, rng, page: str) -> None:
    deliver(client, rng)
    denied = client.get(page)
    assert denied.status_code == 401 and denied.headers["WWW-Authenticate"].startswith("Basic")
    assert client.get(page, headers=BASIC).status_code == 200


def test_api_mirrors_the_ledger(client, redis, rng) -> None:
    event = deliver(client, rng, copies=2)
    pk = event["data"]["object"]["id"]
    summary = client.get("/ops/api/summary", headers=BEARER).get_json()
    assert (summary["deliveries"], summary["events"], summary["duplicates"]) == (2, 1, 1)
    assert summary["workers"]["queue_length"] == 1
    assert summary["payments_by_state"]["queued"] == 1
    rows = client.get("/ops/api/events?limit=5", headers=BEARER).get_json()["events"]
    assert [(r["id"], r["deliveries"], r["payment_key"]) for r in rows] == [(event["id"], 2, pk)]
    assert rows[0]["first_recorded_at"].endswith("Z") and rows[0]["secret_label"]
    assert (
        client.get("/ops/api/events?type=charge.succeeded", headers=BEARER).get_json()["events"]
        == []
    )
    one = client.get(f"/ops/api/events/{event['id']}?payload=1", headers=BEARER).get_json()
    assert json.loads(one["payload"])["id"] == event["id"]
    assert one["payload_sha256"] == hashlib.sha256(one["payload"].encode()).hexdigest()
    assert one["deliveries_by_source"] == {"stripe": 2}
    missing = client.get("/ops/api/events/evt_nope", headers=BEARER)
    assert missing.status_code == 404 and missing.get_json()["error"] == "not_found"
    payments = client.get("/ops/api/payments?state=queued", headers=BEARER).get_json()["payments"]
    assert [p["payment_key"] for p in payments] == [pk]
    obj = event["data"]["object"]
    assert payments[0]["amount"] == {
        "minor_units": obj["amount_received"] or obj["amount"],
        "currency": obj["currency"],
        "exponent": 2,
        "formatted": money.format_minor(obj["amount_received"] or obj["amount"], obj["currency"]),
    }
    assert client.get("/ops/api/payments?state=bogus", headers=BEARER).status_code == 400
    one_payment = client.get(f"/ops/api/payments/{pk}", headers=BEARER).get_json()
    assert [(e["id"], e["type"], e["deliveries"]) for e in one_payment["events"]] == [
        (event["id"], event["type"], 2)
    ]
    assert one_payment["events"][0]["paid_the_payment"] and one_payment["attempts"] == []
    series = client.get("/ops/api/series?minutes=5", headers=BEARER).get_json()["series"]
    assert sum(p["deliveries"] for p in series) == 2 and len(series) == 5


def test_events_paging_and_time_filter(client, redis, rng) -> None:
    ids = [deliver(client, rng)["id"] for _ in range(5)]
    page1 = client.get("/ops/api/events?limit=2", headers=BEARER).get_json()["events"]
    page2 = client.get("/ops/api/events?limit=2&offset=2", headers=BEARER).get_json()["events"]
    seen = [r["id"] for r in page1 + page2]
    assert len(set(seen)) == 4 and set(seen) <= set(ids)
    future = client.get("/ops/api/events?since=2999-01-01T00:00:00Z", headers=BEARER)
    assert future.status_code == 200 and future.get_json()["events"] == []
    past = client.get("/ops/api/events?since=2000-01-01T00:00:00%2B02:00", headers=BEARER)
    assert len(past.get_json()["events"]) == 5
    bad = client.get("/ops/api/events?limit=0", headers=BEARER)
    assert bad.status_code == 400 and "limit must be" in bad.get_json()["message"]
    assert client.get("/ops/api/events?since=yesterday", headers=BEARER).status_code == 400


@pytest.mark.parametrize(
    "since", ["2026-01-02T03:60:05Z", "2026-01-02T03:04:05+05:60", "2026-01-02T03:60:60Z"]
)
def test_only_the_seconds_may_be_60(client, redis, rng, since: str) -> None:
    """A leap second (seconds 60) is read as the second before it; a minute of 60, in the
    time or its offset, is no time: 400 with the reason, on the dashboard too."""
    deliver(client, rng)
    bad = client.get("/ops/api/events", query_string={"since": since}, headers=BEARER)
    assert bad.status_code == 400 and bad.get_json()["error"] == "bad_argument"
    assert bad.get_json()["message"].startswith("since must be an RFC 3339 time")
    page = client.get("/ops/events", query_string={"since": since.rstrip("Z")}, headers=BASIC)
    assert page.status_code == 400
    for leap, found in (("2000-12-31T23:59:60Z", 1), ("2999-12-31T23:59:60Z", 0)):
        read = client.get("/ops/api/events", query_string={"since": leap}, headers=BEARER)
        assert read.status_code == 200 and len(read.get_json()["events"]) == found


def test_openapi_documents_every_api_route(app) -> None:
    spec = yaml.safe_load(Path(app.root_path, "openapi.yaml").read_text())
    documented = {"/ops/api" + p.replace("{", "<").replace("}", ">") for p in spec["paths"]}
    rules = [r.rule for r in app.url_map.iter_rules() if r.rule.startswith("/ops/api")]
    for rule in rules:
        choice = re.search(r"<any\(([^)]*)\):action>", rule)
        for action in choice.group(1).split(", ") if choice else [""]:
            path = rule.replace(choice.group(0), action) if choice else rule
            assert path in documented, rule


def test_retry_needs_post_and_csrf_with_basic_auth(client, redis, rng, config) -> None:
    """A bearer token is enough (a browser never sends one by itself); basic auth, which a
    browser repeats on its own, needs the CSRF token too."""
    pk = deliver(client, rng)["data"]["object"]["id"]
    fail_payment(redis, config, pk)
    url = f"/ops/api/payments/{pk}/retry"
    assert client.get(url, headers=BEARER).status_code == 405
    assert client.post(url, headers=BASIC).status_code == 403
    assert client.post(url, headers={**BASIC, "X-CSRF-Token": "forged"}).status_code == 403
    assert client.post(url).status_code == 401
    ok = client.post(url, headers={**BASIC, "X-CSRF-Token": csrf_token(OPS_TOKEN)})
    assert ok.status_code == 200 and ok.get_json() == {"payment_key": pk, "state": "queued"}
    again = client.post(url, headers=BEARER)
    assert again.status_code == 409 and again.get_json()["state"] == "queued"
    assert again.get_json()["allowed"] == ["failed", "held"]
    nobody = client.post(
        "/ops/api/payments/pi_nobody/retry",
        headers={**BEARER, "X-CSRF-Token": csrf_token(OPS_TOKEN)},
    )
    assert nobody.status_code == 404 and nobody.get_json()["error"] == "not_found"


def test_dashboard_resolve_form(client, redis, rng, config) -> None:
    pk = deliver(client, rng)["data"]["object"]["id"]
    fail_payment(redis, config, pk, "interrupted")
    page = client.get(f"/ops/payments/{pk}", headers=BASIC).get_data(as_text=True)
    assert "interrupted" in page and csrf_token(OPS_TOKEN) in page
    url = f"/ops/payments/{pk}/resolve"
    assert client.post(url, data={"as": "fulfilled"}, headers=BASIC).status_code == 403
    done = client.post(
        url, data={"as": "fulfilled", "csrf_token": csrf_token(OPS_TOKEN)}, headers=BASIC
    )
    assert done.status_code == 303
    assert state_of(redis, pk) == "fulfilled"


def test_dashboard_shows_why_a_decision_was_refused(client, redis, rng, config) -> None:
    """Refused decisions used to answer 303 back to the page with no word of why."""
    pk = deliver(client, rng)["data"]["object"]["id"]
    fail_payment(redis, config, pk, "interrupted")  # its call started just now
    form = {"as": "retry", "csrf_token": csrf_token(OPS_TOKEN)}
    wait = client.post(f"/ops/payments/{pk}/resolve", data=form, headers=BASIC)
    page = wait.get_data(as_text=True)
    assert wait.status_code == 409 and 'id="refusal"' in page
    assert "attempt_may_still_be_running" in page and "may still be running, until" in page
    assert state_of(redis, pk) == "interrupted"
    form = {"csrf_token": csrf_token(OPS_TOKEN)}
    wrong = client.post(f"/ops/payments/{pk}/retry", data=form, headers=BASIC)
    page = wrong.get_data(as_text=True)
    assert wrong.status_code == 409 and "the payment is interrupted" in page
    assert "applies only to failed or held payments" in page
    ok = client.post(f"/ops/payments/{pk}/resolve", data={**form, "as": "fulfilled"}, headers=BASIC)
    assert ok.status_code == 303 and 'id="refusal"' not in client.get(
        ok.headers["Location"], headers=BASIC
    ).get_data(as_text=True)


def test_every_cli_command(client, redis, rng, config, tmp_path) -> None:
    env = {k: str(v) for k, v in config.items()}
    event = deliver(client, rng, copies=2)
    pk = event["data"]["object"]["id"]
    client.post("/webhooks/stripe", data=b"{}", headers=signed_headers(b"{}", secret="whsec_x"))
    summary = json.loads(run_cli(env, "summary", "--json").stdout)
    assert summary["deliveries"] == 2 and summary["workers"]["queue_length"] == 1
    assert json.loads(run_cli(env, "events", "--json").stdout)["events"][0]["deliveries"] == 2
    assert json.loads(run_cli(env, "event", event["id"], "--payload", "--json").stdout)["payload"]
    assert run_cli(env, "event", "evt_missing").exit_code == 1
    assert (
        json.loads(run_cli(env, "payments", "--state", "queued", "--json").stdout)["payments"][0][
            "payment_key"
        ]
        == pk
    )
    assert json.loads(run_cli(env, "payment", pk, "--json").stdout)["state"] == "queued"
    assert run_cli(env, "payment", "pi_missing").exit_code == 1
    rejected = json.loads(run_cli(env, "rejections", "--json").stdout)["rejections"]
    assert rejected[0]["reason"] == "signature_mismatch" and rejected[0]["status"] == 400
    secrets = json.loads(run_cli(env, "secrets", "--json").stdout)["secrets"]
    assert [(r["label"], r["deliveries"], r["status"]) for r in secrets] == [
        (settings_module.fingerprint(SECRET), 2, "in_use"),
        (settings_module.fingerprint(OLD_SECRET), 0, "never_seen"),
    ]
    assert run_cli(env, "retry", pk).exit_code == 1  # queued, not failed
    refused = run_cli(env, "retry", pk, "--json")
    assert refused.exit_code == 1 and json.loads(refused.stdout)["error"] == "refused"
    # nothing due; the forged request above is put on disk (lua/keep_rejections.lua)
    assert json.loads(run_cli(env, "sweep", "--json").stdout) == {"rejections_kept": 1}
    fail_payment(redis, config, pk)
    assert run_cli(env, "retry", pk).exit_code == 0 and state_of(redis, pk) == "queued"
    assert run_cli(env, "resolve", pk).exit_code == 2  # neither --fulfilled nor --retry
    assert run_cli(env, "resolve", pk, "--fulfilled").exit_code == 1  # not interrupted
    assert run_cli(env, "sweep").exit_code == 0
    assert json.loads(run_cli(env, "downstream", "--json").stdout)["totals"] == {
        "calls": 0,
        "effects": 0,
    }
    exported = run_cli(env, "export", str(tmp_path / "b"), "--json")
    assert json.loads(exported.stdout)["records"]["events.json"] == 1
    assert run_cli(env, "verify", str(tmp_path / "b")).exit_code == 0
    for command in ("summary", "events", "payments", "rejections", "secrets", "downstream"):
        table = run_cli(env, command)
        assert table.exit_code == 0 and ("│" in table.stdout or "┃" in table.stdout), command
    down = {"REDIS_URL": "redis://127.0.0.1:1/0"}
    assert run_cli(down, "summary").exit_code == 3


def test_dashboard_cannot_be_framed(client, redis) -> None:
    page = client.get("/ops/", headers=BASIC)
    assert page.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]


def test_the_cli_prints_the_objects_the_api_answers(client, config, one_of_everything) -> None:
    """``webhook-ledger ... --json`` and /ops/api/... give the same typed objects."""
    env = {k: str(v) for k, v in config.items()}
    ids = one_of_everything
    same = {
        ("events",): "events?limit=20",
        ("event", ids.event, "--payload"): f"events/{ids.event}?payload=1",
        ("payments",): "payments?limit=20",
        ("payments", "--state", "attention", "--limit", "5"): "payments?state=attention&limit=5",
        ("payment", ids.fulfilled): f"payments/{ids.fulfilled}",
        ("rejections",): "rejections?limit=20",
        ("secrets",): "secrets",
    }
    for args, route in same.items():
        printed = json.loads(run_cli(env, *args, "--json").stdout)
        assert printed == client.get(f"/ops/api/{route}", headers=BEARER).get_json(), args
    printed = json.loads(run_cli(env, "summary", "--json").stdout)
    answered = client.get("/ops/api/summary", headers=BEARER).get_json()
    for when in (printed, answered):  # read at different moments
        assert set(when.pop("oldest_waiting_s")) == set(WAITING_STATES)
        del when["at"], when["workers"]["oldest_queued_age_s"]
    assert printed == answered and printed["workers"]["registered"] == 0
    assert printed["workers"]["queue_length"] == 2  # the jobs of the two failed by hand
    assert printed["payments_by_state"]["fulfilled"] == 1 and printed["duplicates"] == 2
    payment = client.get(f"/ops/api/payments/{ids.fulfilled}", headers=BEARER).get_json()
    assert payment["downstream"] == {
        "calls": 1,
        "applied": 1,
        "already_applied": 0,
        "effects": 1,
        "regrants": 0,
        "reversal_calls": 0,
        "reversals": 0,
        "reversed_at": None,
    }
    assert payment["reversal"] is None and payment["leg"] == "fulfil"
    assert [a["outcome"] for a in payment["attempts"]] == ["fulfilled"]
    assert payment["receipt"]["outcome"] == "applied"


def test_fulfil_latency_is_over_the_last_hour(redis) -> None:
    """An old backlog (slow payments fulfilled two hours ago) no longer weighs on the
    percentiles; a payment a person marked fulfilled is not a latency at all."""
    seconds, _ = redis.time()
    now = seconds * 1000

    def fulfilled(pk: str, ago_ms: int, latency_ms: int, **extra: str) -> None:
        done = now - ago_ms
        fields = {"state": "fulfilled", "paid_at": done - latency_ms, "fulfilled_at": done}
        redis.hset(keys.payment(pk), mapping={**fields, **extra})
        redis.zadd(keys.state_index("fulfilled"), {pk: done})

    for n in range(50):  # the backlog: 10 minutes each, two hours ago
        fulfilled(f"pi_old{n}", 2 * 3600_000, 600_000)
    for n, latency in enumerate((100, 200, 300, 400)):
        fulfilled(f"pi_new{n}", 60_000, latency)
    fulfilled("pi_by_hand", 60_000, 9_000_000, resolved_by="cli", fulfilled_by_hand="1")
    latency = stats.summary(redis, settings_module.load({})).fulfil_latency
    assert (latency.window_s, latency.payments) == (3600, 4)
    assert (latency.p50_ms, latency.p90_ms, latency.p99_ms) == (200, 400, 400)
    wider = stats.summary(redis, settings_module.load({}), window_s=3 * 3600).fulfil_latency
    assert wider.payments == 54 and wider.p50_ms == 600_000
    # retried by a person, then fulfilled by a worker: counted, as the histogram counts it
    fulfilled("pi_retried", 60_000, 500, resolved_by="cli", resolved_decision="retry")
    latency = stats.summary(redis, settings_module.load({})).fulfil_latency
    assert (latency.payments, latency.p99_ms) == (5, 500)


def test_dashboard_pause_is_confirmed_on_its_own_page_with_csrf(client, redis) -> None:
    overview = client.get("/ops/", headers=BASIC).get_data(as_text=True)
    assert 'id="gate-paused">running' in overview and "Pause fulfilment…" in overview
    page = client.get("/ops/fulfilment", headers=BASIC).get_data(as_text=True)
    assert "Yes, pause fulfilment" in page and csrf_token(OPS_TOKEN) in page
    form = {"reason": "ERP upgrade"}
    assert client.post("/ops/fulfilment/pause", data=form, headers=BASIC).status_code == 403
    assert redis.exists(keys.PAUSE) == 0
    form["csrf_token"] = csrf_token(OPS_TOKEN)
    done = client.post("/ops/fulfilment/pause", data=form, headers=BASIC)
    assert done.status_code == 303
    page = client.get(done.headers["Location"], headers=BASIC).get_data(as_text=True)
    assert "ERP upgrade" in page and "dashboard:default" in page and "Yes, resume" in page
    overview = client.get("/ops/", headers=BASIC).get_data(as_text=True)
    assert "PAUSED since" in overview and "Resume fulfilment…" in overview
    form = {"csrf_token": csrf_token(OPS_TOKEN)}
    assert client.post("/ops/fulfilment/resume", data=form, headers=BASIC).status_code == 303
    assert redis.exists(keys.PAUSE) == 0


def test_the_summary_gives_the_oldest_wait_the_stalled_alert_reads(redis, config) -> None:
    """WebhookFulfilmentStalled reads webhook_payments_oldest_age_seconds; the summary's
    runbook step confirms it with the same figure (it gave only the oldest RQ job's age)."""
    seconds, _ = redis.time()
    redis.zadd(keys.state_index("retrying"), {"pi_waits": seconds * 1000 - 700_000})
    summary = stats.summary(redis, settings_module.load({}))
    assert summary.oldest_waiting_s == health(redis, summary.at).oldest_age_s
    assert summary.oldest_waiting_s["retrying"] >= 700 and summary.oldest_waiting_s["queued"] == 0
    shown = run_cli(config, "summary").stdout
    waits = summary.oldest_waiting_s
    assert "longest queued / retrying payment (s)" in shown, shown
    printed = re.search(r"longest queued / retrying payment \(s\)\W+([\d.,]+) / ([\d.,]+)", shown)
    assert printed is not None, shown
    queued, retrying = (float(n.replace(",", "")) for n in printed.groups())
    assert queued == 0 and 0 <= retrying - waits["retrying"] < 30  # read a moment later
