"""scripts/replay_events.py against a real service: sources, probes, report, exit status."""

import json
import sqlite3
import subprocess
import sys
from http.server import BaseHTTPRequestHandler

import pytest

from ledgerctl import samples
from tests.support.processes import Gunicorn, wait_until
from tests.support.replay import AGAINST_A_STAND_IN, local_server, replay, run_script
from tests.support.stripe_api import API_KEY, EventsApi


@pytest.fixture
def service(stack, tmp_path):
    s = stack(TMP_REPORT=str(tmp_path / "report.json"))
    web = s.start_web()
    s.start_worker()
    s.start_sweeper()
    return s, f"{web.url}/webhooks/stripe"


def test_case_study_scenario(service, redis) -> None:
    s, url = service
    status, report = replay(s.env, url, "--scenario", "case-study", "--expect-once")
    assert status == 0
    layers = report["layers"]
    assert layers["sent"] == {"total": 4, "valid": 3, "bad-signature": 1}
    assert layers["answered"] == {"200": 3, "400": 1}
    assert (
        layers["ledger"]["deliveries"],
        layers["ledger"]["events"],
        layers["ledger"]["rejected"],
    ) == (3, 1, 1)
    assert layers["downstream"]["effects"] == 1 and layers["downstream"]["calls"] == 1
    assert report["findings"]["ok"] and report["version"] and report["seed"] is not None


def test_each_probe_is_counted_separately(service, redis) -> None:
    s, url = service
    _, report = replay(
        s.env, url, "--generate", "1", "--bad-signature", "2", "--stale", "3", "--wrong-secret", "4"
    )
    assert report["layers"]["sent"] == {
        "total": 12,
        "valid": 3,
        "bad-signature": 2,
        "stale": 3,
        "wrong-secret": 4,
    }
    assert report["layers"]["ledger"]["rejected_by_reason"] == {
        "signature_mismatch": 6,
        "timestamp_outside_tolerance": 3,
    }


def test_file_sources(service, redis, tmp_path, rng) -> None:
    s, url = service
    events = samples.payment_events(rng)
    folder = tmp_path / "events"
    folder.mkdir()
    (folder / "one.json").write_bytes(samples.encode(events[0]))
    (folder / "array.json").write_text(json.dumps([events[1]]))
    (folder / "lines.jsonl").write_text(json.dumps(events[2]) + "\n")
    _, report = replay(s.env, url, str(folder), "--copies", "2", "--expect-once")
    assert (
        report["layers"]["ledger"]["events"] == 3 and report["layers"]["ledger"]["deliveries"] == 6
    )
    assert report["layers"]["payments"] == {"fulfilled": 1}
    single = tmp_path / "single.json"
    single.write_bytes(samples.encode(events[2]))
    _, again = replay(s.env, url, str(single))
    assert again["layers"]["ledger"] == {
        "deliveries": 1,
        "events": 0,
        "duplicates": 1,
        "rejected": 0,
        "rejected_by_reason": {},
    }


def test_ledger_sources_resend_the_stored_bytes(service, redis) -> None:
    s, url = service
    _, first = replay(s.env, url, "--generate", "2", "--seed", "3")
    assert first["layers"]["ledger"]["events"] == 6
    _, by_type = replay(s.env, url, "--from-ledger", "--type", "payment_intent.succeeded")
    assert (
        by_type["layers"]["ledger"]["duplicates"] == 2
        and by_type["layers"]["ledger"]["events"] == 0
    )
    payment = redis.zrange("wl:payments:state:fulfilled", 0, 0)[0].decode()
    _, by_payment = replay(s.env, url, "--from-ledger", "--payment", payment)
    assert by_payment["layers"]["sent"]["valid"] == 3
    _, everything = replay(s.env, url, "--from-ledger", "--since", "0", "--expect-once")
    assert everything["layers"]["sent"]["valid"] == 6 and everything["findings"]["ok"]
    event_id = redis.zrange("wl:events:index", 0, 0)[0].decode()
    _, by_id = replay(s.env, url, "--from-ledger", "--id", event_id, "--copies", "2")
    assert by_id["layers"]["ledger"]["deliveries"] == 2


def test_stripe_retry_schedule_and_shape(service, redis) -> None:
    s, url = service
    _, report = replay(
        s.env,
        url,
        "--generate",
        "2",
        "--stripe-retries",
        "4",
        "--compress",
        "3000",
        "--shuffle",
        "--seed",
        "9",
        "--concurrency",
        "4",
        "--jitter",
        "0.01",
        "--expect-once",
    )
    assert (
        report["layers"]["sent"]["valid"] == 24 and report["layers"]["ledger"]["duplicates"] == 18
    )
    assert report["parameters"]["seed"] == 9 and report["timings"]["send_s"] >= 1800 / 3000


def test_expect_once_fails_on_a_double_effect(stack, redis, tmp_path) -> None:
    broken_db = tmp_path / "broken.sqlite3"
    s = stack(
        FULFILMENT_ACTION="tests.support.broken_actions:apply_twice",
        BROKEN_DB=str(broken_db),
        TMP_REPORT=str(tmp_path / "r.json"),
    )
    url = f"{s.start_web().url}/webhooks/stripe"
    s.start_worker()
    status, report = replay(
        s.env, url, "--generate", "2", "--expect-once", "--downstream-db", str(broken_db), expect=1
    )
    assert status == 1
    assert len(report["findings"]["duplicated"]) == 2
    assert report["findings"]["lost"] == []


def test_a_downstream_db_that_is_not_sqlite_ends_with_exit_3_and_its_path(
    stack, redis, tmp_path
) -> None:
    """Read once everything was sent and settled: one line naming the file, not a traceback."""
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 100)
    s = stack()
    url = f"{s.start_web().url}/webhooks/stripe"
    s.start_worker()
    proc = run_script(s.env, "--url", url, "--generate", "1", "--downstream-db", str(text))
    assert proc.returncode == 3, proc.stderr
    said = " ".join(proc.stderr.split())  # the terminal's width wraps it
    assert f"Downstream unusable: {text}: file is not a database" in said
    assert "Traceback" not in proc.stderr


def test_expect_once_fails_on_a_missing_delivery(stack, redis, tmp_path) -> None:
    """An endpoint that answers 200 without recording anything: the ledger never saw it."""

    def liar(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "2")
        handler.end_headers()
        handler.wfile.write(b"{}")

    s = stack(TMP_REPORT=str(tmp_path / "r.json"))
    with local_server(liar) as base:
        status, report = replay(s.env, f"{base}/webhooks/stripe", *AGAINST_A_STAND_IN, expect=1)
    assert status == 1
    assert {item["acked"] for item in report["findings"]["lost"]} == {1}
    assert len(report["findings"]["lost"]) == 3


def test_export_verify_and_tampering(service, redis, tmp_path) -> None:
    s, url = service
    replay(s.env, url, "--scenario", "case-study")
    bundle = tmp_path / "bundle"
    cli = [sys.executable, "-m", "ledgerctl.cli"]
    subprocess.run([*cli, "export", str(bundle)], env=s.env, check=True, capture_output=True)
    replay(s.env, url, "--generate", "1", "--no-wait", out=bundle / "replay.json")
    assert "replay.json" in (bundle / "MANIFEST.sha256").read_text()
    ok = subprocess.run(
        [*cli, "verify", str(bundle), "--json"], env=s.env, capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stdout
    assert json.loads(ok.stdout)["passed"] > 10
    orders = json.loads((bundle / "downstream_orders.json").read_text())
    (bundle / "downstream_orders.json").write_text(json.dumps(orders + orders))
    tampered = subprocess.run(
        [*cli, "verify", str(bundle)], env=s.env, capture_output=True, text=True
    )
    assert tampered.returncode == 1 and "hash does not match" in tampered.stdout


def test_verify_catches_relations_even_with_a_rewritten_manifest(service, redis, tmp_path) -> None:
    from ledgerctl.bundle import MANIFEST, _sha, verify

    s, url = service
    replay(s.env, url, "--generate", "2")
    bundle = tmp_path / "b"
    subprocess.run(
        [sys.executable, "-m", "ledgerctl.cli", "export", str(bundle)], env=s.env, check=True
    )
    assert not verify(bundle).failures
    orders_path = bundle / "downstream_orders.json"
    orders = json.loads(orders_path.read_text())
    orders.append({**orders[0], "idempotency_key": "forged"})
    orders_path.write_text(json.dumps(orders))
    counters_path = bundle / "counters.json"
    counters = json.loads(counters_path.read_text())
    counters["stats"]["deliveries"] += 1
    counters_path.write_text(json.dumps(counters))
    (bundle / MANIFEST).write_text(
        "".join(f"{_sha(p)}  {p.name}\n" for p in sorted(bundle.glob("*.json")))
    )
    failures = verify(bundle).failures
    assert any("2 effects" in f for f in failures)
    assert any("sum to the counter" in f for f in failures)


def test_unacknowledged_deliveries_fail_expect_once(stack, redis, tmp_path) -> None:
    s = stack(TMP_REPORT=str(tmp_path / "r.json"))
    dead = Gunicorn(s.env)  # never started: nothing listens on its port
    status, report = replay(
        s.env, f"{dead.url}/webhooks/stripe", "--generate", "1", "--expect-once", expect=1
    )
    assert report["layers"]["answered"] == {"0": 3}
    assert report["findings"]["lost"] == []  # nothing was acknowledged, so nothing is lost
    assert report["findings"]["unacknowledged"] == 3 and not report["findings"]["passed"]


def test_generated_checkout_purchases_name_their_orders(stack, redis, tmp_path) -> None:
    """``--checkout``: each session names its order, and each action gets it (the purchase,
    stored by the built-in downstream). The session's event comes last, as Stripe sends it:
    a worker may take the payment before it, so the deployment waits for sessions, as one
    selling through Checkout does (CHECKOUT_WAIT_SECONDS)."""
    s = stack(TMP_REPORT=str(tmp_path / "r.json"), CHECKOUT_WAIT_SECONDS="30")
    url = f"{s.start_web().url}/webhooks/stripe"
    s.start_worker()
    s.start_sweeper()
    replay(s.env, url, "--generate", "3", "--checkout", "--expect-once")
    db = sqlite3.connect(str(s.env["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))
    rows = db.execute("SELECT client_reference_id, purchase FROM orders").fetchall()
    assert sorted(r[0] for r in rows) == ["order_000001", "order_000002", "order_000003"]
    for order, purchase in rows:
        assert json.loads(purchase)["metadata"]["checkout_session"] == {"order": order}


def test_generated_checkout_purchases_get_line_items_from_a_stand_in(
    stack, redis, tmp_path
) -> None:
    """``--serve-sessions``: each generated session, with its line items, is given to the
    stand-in of Stripe's API the service reads (CHECKOUT_LINE_ITEMS), so each action gets
    the line items, adding up to what was paid."""
    api = EventsApi().start()
    try:
        s = stack(
            TMP_REPORT=str(tmp_path / "r.json"),
            CHECKOUT_LINE_ITEMS="true",
            CHECKOUT_WAIT_SECONDS="60",  # a PaymentIntent's event may come before its session's
            STRIPE_API_KEY=API_KEY,
            STRIPE_API_BASE=api.url,
        )
        url = f"{s.start_web().url}/webhooks/stripe"
        s.start_worker()
        s.start_sweeper()
        replay(
            s.env, url, "--scenario", "multi-event", "--generate", "3", "--serve-sessions", api.url
        )
        db = sqlite3.connect(str(s.env["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))
        orders = "SELECT client_reference_id, purchase FROM orders"
        # The replay returns once its deliveries are answered; the worker reads each
        # session's line items from the stand-in after that, so it stays up until then.
        wait_until(lambda: len(db.execute(orders).fetchall()) == 3, 60, what="3 orders")
    finally:
        api.stop()
    assert len(api.sessions) == 3
    rows = db.execute(orders).fetchall()
    assert sorted(r[0] for r in rows) == ["order_000001", "order_000002", "order_000003"]
    for _, stored in rows:
        purchase = json.loads(stored)
        items = purchase["line_items"]
        assert items and sum(i["amount_total"] for i in items) == purchase["amount"]
        assert purchase["metadata"]["checkout_session"]["order"]
