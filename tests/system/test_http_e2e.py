"""End to end over real HTTP to gunicorn (2 workers) and a real redis-server."""

import hashlib
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import orjson
import requests
from prometheus_client.parser import text_string_to_metric_families

from ledger import keys
from ledger.payloads import decompress_payload
from tests.support.constants import BEARER, OPS_TOKEN, SECRET
from tests.support.helpers import STRIPE_UA, paid_event, signed_headers, stats
from tests.support.processes import Gunicorn, free_port, service_env


def test_case_study_control(web, redis, rng) -> None:
    """1 original + 2 signed replays of the same bytes + 1 invalid signature."""
    event, body = paid_event(rng)
    url = f"{web.url}/webhooks/stripe"
    answers = [requests.post(url, data=body, headers=signed_headers(body)) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert [a.json()["deliveries"] for a in answers] == [1, 2, 3]
    forged = requests.post(url, data=body, headers=signed_headers(body, secret="whsec_forged"))
    assert forged.status_code == 400 and forged.json() == {"error": "signature_mismatch"}

    counters = stats(redis)
    assert counters["deliveries"] == 3
    assert counters["events"] == 1
    assert counters["duplicates"] == 2
    assert counters["rejected"] == 1 and counters["rejected:signature_mismatch"] == 1
    stored = redis.hget(keys.event(event["id"]), "body")
    assert (
        hashlib.sha256(decompress_payload(stored)).hexdigest() == hashlib.sha256(body).hexdigest()
    )
    summary = requests.get(
        f"{web.url}/ops/api/summary", headers={"Authorization": f"Bearer {OPS_TOKEN}"}
    ).json()
    assert (summary["deliveries"], summary["events"], summary["rejected"]) == (3, 1, 1)
    assert summary["rejected_by_reason"] == {"signature_mismatch": 1}


def test_stripe_cli_shaped_requests(web, redis, rng) -> None:
    """Exactly as `stripe listen` forwards: charset, Stripe UA, v1 and v0, gzip accepted."""
    event, body = paid_event(rng)
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "User-Agent": STRIPE_UA,
        "Stripe-Signature": signed_headers(body, v0=True)["Stripe-Signature"],
        "Accept-Encoding": "gzip",
        "Accept": "*/*; q=0.5, application/xml",
        "Cache-Control": "no-cache",
    }
    assert ",v0=" in headers["Stripe-Signature"]
    answer = requests.post(f"{web.url}/webhooks/stripe", data=body, headers=headers)
    assert answer.status_code == 200
    assert answer.json() == {"event_id": event["id"], "deliveries": 1, "duplicate": False}
    assert redis.hget(keys.event(event["id"]), "src:stripe") == b"1"


def test_fifty_concurrent_copies_over_http(web, redis, rng) -> None:
    event, body = paid_event(rng)
    url = f"{web.url}/webhooks/stripe"
    start = threading.Barrier(50)

    def send(_: int) -> int:
        start.wait()
        answer = requests.post(url, data=body, headers=signed_headers(body), timeout=30)
        assert answer.status_code == 200
        return int(answer.json()["deliveries"])

    with ThreadPoolExecutor(50) as pool:
        seen = sorted(pool.map(send, range(50)))
    assert seen == list(range(1, 51))
    counters = stats(redis)
    assert (counters["deliveries"], counters["events"], counters["duplicates"]) == (50, 1, 49)
    assert redis.hget(keys.event(event["id"]), "n") == b"50"
    assert redis.llen("rq:queue:fulfilment") == 1


def test_redis_down_answers_503_fast_and_recovers(redis_server, redis, rng, tmp_path) -> None:
    """Nothing is acknowledged that the ledger did not record; the service heals by itself."""
    from tests.support.processes import RedisServer

    port = free_port()
    env = service_env(
        f"redis://127.0.0.1:{port}/0", {"STRIPE_WEBHOOK_SECRET": SECRET, "OPS_TOKEN": OPS_TOKEN}
    )
    web = Gunicorn(env, workers=1, log=tmp_path / "web.log").start()
    try:
        event, body = paid_event(rng)
        url = f"{web.url}/webhooks/stripe"
        began = time.monotonic()
        down = requests.post(url, data=body, headers=signed_headers(body), timeout=10)
        assert down.status_code == 503 and down.json()["error"] == "ledger_unavailable"
        assert time.monotonic() - began < 3
        assert requests.get(f"{web.url}/readyz").status_code == 503
        assert requests.get(f"{web.url}/healthz").status_code == 200
        late = RedisServer(tmp_path / "late", port=port).start()
        try:
            up = requests.post(url, data=body, headers=signed_headers(body), timeout=10)
            assert up.status_code == 200 and up.json()["deliveries"] == 1
            assert requests.get(f"{web.url}/readyz").status_code == 200
        finally:
            late.stop()
    finally:
        web.stop()


def test_ops_summary_needs_the_token(web, redis) -> None:
    url = f"{web.url}/ops/api/summary"
    assert requests.get(url).status_code == 401
    assert requests.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert requests.get(url, headers={"Authorization": f"Bearer {OPS_TOKEN}"}).status_code == 200


def test_cli_summary_matches_the_api(web, redis, rng, redis_server) -> None:
    event, body = paid_event(rng)
    requests.post(f"{web.url}/webhooks/stripe", data=body, headers=signed_headers(body))
    out = subprocess.run(
        [sys.executable, "-m", "ledgerctl.cli", "summary", "--json"],
        env=service_env(redis_server.url),
        capture_output=True,
        check=True,
    )
    data = orjson.loads(out.stdout)
    assert (data["deliveries"], data["events"], data["payments_by_state"]["queued"]) == (1, 1, 1)
    assert data["workers"]["queue_length"] == 1  # the API's workers block, in the CLI too
    table = subprocess.run(
        [sys.executable, "-m", "ledgerctl.cli", "summary"],
        env=service_env(redis_server.url),
        capture_output=True,
        check=True,
        text=True,
    )
    assert "deliveries" in table.stdout and "queued" in table.stdout


def test_logs_are_json_lines_without_secrets_signatures_or_payloads(web, redis, rng) -> None:
    event, body = paid_event(rng)
    headers = signed_headers(body)
    url = f"{web.url}/webhooks/stripe"
    requests.post(url, data=body, headers=headers)
    requests.post(url, data=body, headers=signed_headers(body, secret="whsec_forged_one"))
    web.stop()
    assert web.log is not None
    text = web.log.read_text()
    lines = [orjson.loads(ln) for ln in text.splitlines() if ln.startswith("{")]
    delivery = next(ln for ln in lines if ln.get("status") == 200)
    assert {"event_id", "type", "payment", "deliveries", "status", "ms"} <= set(delivery)
    assert any(ln.get("reason") == "signature_mismatch" for ln in lines)
    signature = headers["Stripe-Signature"].split("v1=")[1]
    for secret in (SECRET, "whsec_forged_one", signature, '"object": "payment_intent"'):
        assert secret not in text


def test_metrics_agree_with_summary_across_two_gunicorn_workers(
    config, redis, rng, tmp_path
) -> None:
    env = service_env(str(config["REDIS_URL"]), {k: str(v) for k, v in config.items()})
    web = Gunicorn(env, workers=2, log=tmp_path / "web.log").start()
    try:
        url = f"{web.url}/webhooks/stripe"
        sent = 0
        for _ in range(20):
            event, body = paid_event(rng)
            for _ in range(2):
                assert (
                    requests.post(url, data=body, headers=signed_headers(body)).status_code == 200
                )
                sent += 1
        for _ in range(3):
            requests.post(url, data=b"{}", headers={"Content-Type": "application/json"})
            sent += 1
        assert requests.get(f"{web.url}/metrics").status_code == 401
        summary = requests.get(f"{web.url}/ops/api/summary", headers=BEARER).json()
        for _ in range(4):  # whichever worker answers, the figures are the same
            text = requests.get(f"{web.url}/metrics", headers=BEARER).text
            families = {f.name: f for f in text_string_to_metric_families(text)}
            assert total(families, "webhook_deliveries") == summary["deliveries"] == 40
            assert total(families, "webhook_duplicates") == summary["duplicates"] == 20
            # the 3 forged deliveries and the scrape without a token (unauthorized)
            assert total(families, "webhook_rejections") == summary["rejected"] == 4
            states = {s.labels["state"]: s.value for s in families["webhook_payments"].samples}
            assert states["queued"] == summary["payments_by_state"]["queued"] == 20
            count = [
                s
                for s in families["webhook_request_duration_seconds"].samples
                if s.name.endswith("_count")
            ]
            assert sum(s.value for s in count) == sent
    finally:
        web.stop()


def total(families: dict, name: str) -> float:
    return sum(s.value for s in families[name].samples if s.name.endswith("_total"))
