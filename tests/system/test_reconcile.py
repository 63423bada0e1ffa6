"""``webhook-ledger reconcile`` against a local server in Stripe's Events API format, with the
real stripe-python client (STRIPE_API_BASE): report what Stripe has and the ledger lacks,
record it with --apply (source api, no delivery), once, concurrently with intake."""

import json
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis

from ledger import keys, reconcile
from ledger import settings as settings_module
from ledger.read import events
from ledgerctl import bundle, samples
from ledgerctl.checker import check
from tests.integration.test_lua_atomicity import dump
from tests.integration.test_lua_record_delivery import make_ledger
from tests.integration.test_lua_record_delivery_api import by_webhook
from tests.support.constants import BASIC, BEARER
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import after_sweeps, settled_as, state_of, stats
from tests.support.processes import free_port, service_env, wait_until
from tests.support.stripe_api import API_KEY, EventsApi

Payment = list[dict[str, Any]]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``webhook-ledger ARGS`` in its own process, as a person or a cron job runs it."""
    argv = [sys.executable, "-m", "ledgerctl.cli", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True)


@pytest.fixture
def env(config: dict[str, object], stripe_api: EventsApi) -> dict[str, str]:
    given = {k: str(v) for k, v in config.items()}
    return service_env(
        str(config["REDIS_URL"]),
        {**given, "STRIPE_API_KEY": API_KEY, "STRIPE_API_BASE": stripe_api.url},
    )


def card_payments(rng: random.Random, count: int, created: int) -> list[Payment]:
    """``count`` card payments, 3 events each (created, charge.succeeded, succeeded)."""
    return [samples.payment_events(rng, created=created - i) for i in range(count)]


def pi_of(payment: Payment) -> str:
    return str(payment[2]["data"]["object"]["id"])


def without_runs(snapshot: dict[bytes, bytes | None]) -> dict[bytes, bytes | None]:
    return {k: v for k, v in snapshot.items() if k != keys.RECONCILE_RUNS.encode()}


def test_a_dry_run_reports_what_stripe_has_and_the_ledger_lacks(
    redis: Redis,
    redis_server,
    rng: random.Random,
    stripe_api: EventsApi,
    env: dict[str, str],
) -> None:
    ledger, now = make_ledger(redis_server.url), int(time.time())
    delivered, pending = card_payments(rng, 40, now), card_payments(rng, 10, now - 3600)
    missing, too_old = card_payments(rng, 40, now - 7200), card_payments(rng, 5, now - 10 * 86400)
    for event in (e for p in delivered for e in p):
        stripe_api.add(event, delivered=True)
        by_webhook(ledger, event)
    for event in (e for p in pending for e in p):
        stripe_api.add(event)  # Stripe still retries it, but the ledger has it
        by_webhook(ledger, event)
    for event in (e for p in missing + too_old for e in p):
        stripe_api.add(event)
    before = dump(redis)
    answer = cli(env, "reconcile", "--since", "3d", "--json")
    assert answer.returncode == 1 and not answer.stderr, answer.stderr  # a dry run: no records
    report = json.loads(answer.stdout)
    assert (report["listed"], report["missing_total"], report["applied"]) == (150, 120, False)
    assert report["by_type"] == {t: 40 for t in samples.CARD_PAYMENT}
    assert report["payments"] == sorted(pi_of(p) for p in missing)
    wanted = {e["id"]: (e["type"], pi_of(p)) for p in missing for e in p}
    assert {m["id"]: (m["type"], m["payment_key"]) for m in report["missing"]} == wanted
    assert {m["type"] for m in report["missing"] if m["pays"]} == set(samples.PAID_TYPES[:2])
    assert report["window_start"].endswith("Z") and report["missing"][0]["created_at"]
    assert without_runs(dump(redis)) == without_runs(before)
    # The real client followed Stripe's pagination: 150 undelivered events, pages of 100.
    first, second = stripe_api.requests
    assert (first["delivery_success"], first["limit"]) == (["false"], ["100"])
    assert abs(int(first["created[gte]"][0]) - (now - 3 * 86400)) < 60
    newest_first = sorted(
        (e for p in pending + missing for e in p), key=lambda e: (e["created"], e["id"])
    )[::-1]
    assert second["starting_after"] == [newest_first[99]["id"]]
    stored = reconcile.runs(redis)[0]
    assert (stored.missing_total, len(stored.missing), stored.trigger) == (120, 100, "cli")
    table = cli(env, "reconcile", "--since", "3d")
    assert table.returncode == 1 and "--apply records them" in table.stdout
    assert "missing: charge.succeeded" in table.stdout


def test_apply_records_what_is_missing_once_and_a_second_run_finds_nothing(
    redis: Redis,
    redis_server,
    rng: random.Random,
    stripe_api: EventsApi,
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    ledger, now = make_ledger(redis_server.url), int(time.time())
    delivered, missing = card_payments(rng, 5, now), card_payments(rng, 40, now - 5 * 86400)
    for event in (e for p in delivered for e in p):
        stripe_api.add(event, delivered=True)
        by_webhook(ledger, event)
    for event in (e for p in missing for e in p):
        stripe_api.add(event)
    queue = f"rq:queue:{ledger.settings.QUEUE_NAME}"
    jobs, counted = redis.llen(queue), stats(redis)
    answer = cli(env, "reconcile", "--apply", "--json")
    assert answer.returncode == 0, answer.stderr
    report = json.loads(answer.stdout)
    assert (report["missing_total"], report["recorded"], report["arrived"]) == (120, 120, 0)
    assert report["enqueued"] == 40 and redis.llen(queue) == jobs + 40
    after = stats(redis)
    assert after["deliveries"] == counted["deliveries"] == 15
    assert (after["events"], after["reconciled"]) == (135, 120)
    for payment in missing:
        assert state_of(redis, pi_of(payment)) == "queued"
        for event in payment:
            record = events.event(redis, event["id"])
            assert record is not None and (record.deliveries, record.origin) == (0, "api")
    again = cli(env, "reconcile", "--apply", "--json")
    second = json.loads(again.stdout)
    assert again.returncode == 0 and (second["listed"], second["missing_total"]) == (120, 0)
    assert redis.llen(queue) == jobs + 40 and stats(redis)["reconciled"] == 120
    bundle.export(redis, tmp_path / "b", str(ledger.settings.FULFILMENT_ACTION))
    assert bundle.verify(tmp_path / "b").failures == []


def test_reconcile_refuses_what_it_cannot_do(
    redis: Redis, stripe_api: EventsApi, env: dict[str, str], rng: random.Random
) -> None:
    for event in samples.payment_events(rng):
        stripe_api.add(event)
    assert cli({**env, "STRIPE_API_KEY": ""}, "reconcile").returncode == 2
    assert cli(env, "reconcile", "--since", "31d").returncode == 2  # past EVENT_RETENTION_DAYS
    assert cli(env, "reconcile", "--since", "3 days").returncode == 2
    wrong = cli({**env, "STRIPE_API_KEY": "rk_test_wrong"}, "reconcile", "--json")
    assert wrong.returncode == 4
    assert json.loads(wrong.stdout)["error"].startswith("AuthenticationError")
    nobody = cli({**env, "STRIPE_API_BASE": f"http://127.0.0.1:{free_port()}"}, "reconcile")
    assert nobody.returncode == 4 and "APIConnectionError" in nobody.stdout
    assert [(r.error or "").split(":")[0] for r in reconcile.runs(redis)] == [
        "APIConnectionError",
        "AuthenticationError",
    ]
    assert not list(redis.scan_iter(match=keys.event("*")))
    assert cli({**env, "REDIS_URL": "redis://127.0.0.1:1/0"}, "reconcile").returncode == 3


def test_stripe_gave_up_delivering_reconcile_fulfils_each_payment_once(
    stack,
    redis: Redis,
    rng: random.Random,
    stripe_api: EventsApi,
) -> None:
    """The endpoint was down for Stripe's three days of retries: 30 paid payments (90 events)
    never delivered. Stripe's last retries of 5 payments land while reconcile --apply waits for
    its list (they are found recorded), of 5 more after its writes (their first delivery). The
    exact race of a retry and reconcile's write is test_lua_record_delivery_api's barrier test.
    Each payment is fulfilled by exactly one downstream call (this downstream counts every call,
    never deduplicates)."""
    payments = card_payments(rng, 30, int(time.time()) - 3 * 86400)
    for event in (e for p in payments for e in p):
        stripe_api.add(event)
    with CountingDownstream() as downstream, ThreadPoolExecutor(1) as pool:
        s = stack(
            FULFILMENT_ACTION=downstream.url, STRIPE_API_KEY=API_KEY, STRIPE_API_BASE=stripe_api.url
        )
        s.start_web()
        stripe_api.gate.clear()
        reconciling = pool.submit(cli, s.env, "reconcile", "--apply", "--json")
        wait_until(lambda: stripe_api.requests, what="reconcile listing Stripe's events")
        early = [e for p in payments[:5] for e in p]
        assert [s.send(samples.encode(e)).status_code for e in early] == [200] * 15
        stripe_api.gate.set()
        run = reconciling.result()
        assert run.returncode == 0, run.stderr
        report = json.loads(run.stdout)
        assert (report["listed"], report["missing_total"]) == (90, 75)
        assert (report["arrived"], report["recorded"], report["enqueued"]) == (0, 75, 25)
        late = [e for p in payments[5:10] for e in p]
        answers = [s.send(samples.encode(e)).json() for e in late]
        assert {(a["deliveries"], a["duplicate"]) for a in answers} == {(1, False)}
        s.start_worker()
        s.start_sweeper()
        for payment in payments:
            wait_until(lambda p=payment: settled_as(redis, pi_of(p), "fulfilled"), timeout=60)
        calls = {pi_of(p): downstream.calls[pi_of(p)] for p in payments}
        assert calls == {pi_of(p): 1 for p in payments}
    counts = stats(redis)
    assert (counts["events"], counts["deliveries"], counts["reconciled"]) == (90, 30, 75)
    assert counts.get("duplicates", 0) == 0 and redis.llen("rq:queue:fulfilment") == 0
    delivered = early + late
    recorded = {e["id"]: int(redis.hget(keys.event(e["id"]), "n") or 0) for e in delivered}
    paid = {pi_of(p) for p in payments}
    found = check({e["id"]: 1 for e in delivered}, recorded, paid, calls, dict.fromkeys(paid, ""))
    assert found.ok and found.checks == 60
    again = cli(s.env, "reconcile", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["missing_total"] == 0


def test_the_sweeper_reconciles_once_per_interval(
    stack,
    redis: Redis,
    rng: random.Random,
    stripe_api: EventsApi,
) -> None:
    """Two sweepers, RECONCILE_INTERVAL an hour: one run, applied, and its payments fulfilled."""
    payments = card_payments(rng, 3, int(time.time()) - 4 * 86400)
    for event in (e for p in payments for e in p):
        stripe_api.add(event)
    s = stack(STRIPE_API_KEY=API_KEY, STRIPE_API_BASE=stripe_api.url, RECONCILE_INTERVAL="3600")
    s.start_worker()
    s.start_sweeper()
    s.start_sweeper()
    wait_until(lambda: reconcile.runs(redis), what="a scheduled reconcile run")
    for payment in payments:
        wait_until(lambda p=payment: settled_as(redis, pi_of(p), "fulfilled"), timeout=30)
    after_sweeps(redis, 10)
    runs = reconcile.runs(redis, 10)
    assert len(runs) == 1, "one run per interval, however many sweepers"
    assert (runs[0].trigger, runs[0].applied, runs[0].recorded) == ("sweeper", True, 9)
    assert redis.pttl(keys.RECONCILE_SLOT) > 3_500_000


def test_reconcile_interval_needs_a_key(config: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="STRIPE_API_KEY"):
        settings_module.load({}, RECONCILE_INTERVAL=60.0)


def test_the_dashboard_api_and_metrics_show_the_last_run(
    client,
    redis: Redis,
    redis_server,
    rng: random.Random,
    stripe_api: EventsApi,
) -> None:
    page = client.get("/ops/", headers=BASIC).get_data(as_text=True)
    assert 'id="reconcile-last">never run' in page and "Not scheduled" in page
    payment = card_payments(rng, 1, int(time.time()))[0]
    for event in payment:
        stripe_api.add(event)
    ledger = make_ledger(redis_server.url, STRIPE_API_KEY=API_KEY, STRIPE_API_BASE=stripe_api.url)
    reconcile.reconcile(ledger, 3600, apply=False)
    page = client.get("/ops/", headers=BASIC).get_data(as_text=True)
    assert "(cli, dry run)" in page and 'id="reconcile-missing" class="bad">3 / 3' in page
    assert "missing charge.succeeded" in page
    assert f"<code>{pi_of(payment)}</code> (a paid event)" in page
    runs = client.get("/ops/api/reconcile", headers=BEARER).get_json()
    assert runs["interval_s"] == 0 and runs["runs"][0]["missing_total"] == 3
    reconcile.reconcile(ledger, 3600, apply=True)
    assert client.get("/ops/api/summary", headers=BEARER).get_json()["reconciled"] == 3
    families = metric_families(client)
    assert families["webhook_reconcile_missing"].samples[0].value == 3
    assert families["webhook_reconciled_events"].samples[0].value == 3
    assert families["webhook_reconcile_failed"].samples[0].value == 0
    wrong = make_ledger(redis_server.url, STRIPE_API_KEY="rk_wrong", STRIPE_API_BASE=stripe_api.url)
    reconcile.reconcile(wrong, 3600, apply=True)
    page = client.get("/ops/", headers=BASIC).get_data(as_text=True)
    assert 'id="reconcile-error">AuthenticationError' in page
    assert metric_families(client)["webhook_reconcile_failed"].samples[0].value == 1


def metric_families(client) -> dict[str, Any]:
    text = client.get("/metrics", headers=BEARER).get_data(as_text=True)
    return {f.name: f for f in text_string_to_metric_families(text)}
