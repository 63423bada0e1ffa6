"""The shipped monitoring against a running service: Debian's real Prometheus scrapes
/metrics with METRICS_TOKEN through the example config and evaluates the shipped rules (a
failed payment and a burst of forged requests raise their alerts; so do the 503s of a killed
Redis, which /metrics still reports), and every metric the rules and the Grafana dashboard
use is one the service exports."""

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis

from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import payment_key_of, settled_as, signed_headers
from tests.support.processes import RedisServer, wait_until
from tests.support.prometheus import RUNBOOK_BASE, Prometheus, used_metric_names
from tests.support.stack import Stack
from tests.support.stripe_api import API_KEY, EventsApi

METRICS_TOKEN = "metrics-test-token"
FORGED = 100


def firing_or_pending(prom: Prometheus, name: str, **labels: str) -> dict[str, Any] | None:
    for alert in prom.alerts():
        wanted = {"alertname": name, **labels}
        if all(alert["labels"].get(k) == v for k, v in wanted.items()):
            return alert
    return None


def raised(prom: Prometheus, name: str, **labels: str) -> dict[str, Any]:
    """The alert once Prometheus has it pending or firing (its rules run every second)."""
    return wait_until(lambda: firing_or_pending(prom, name, **labels), 90, 0.5, name)


def scraped_names(web_url: str) -> set[str]:
    answer = requests.get(
        f"{web_url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10
    )
    assert answer.status_code == 200
    return {s.name for f in text_string_to_metric_families(answer.text) for s in f.samples}


def test_prometheus_raises_the_alerts_of_a_failed_payment_and_forged_requests(
    stack: Callable[..., Stack], redis: Redis, rng: Any, tmp_path: Path
) -> None:
    with CountingDownstream(default=400) as downstream:  # a 400: the payment fails for good
        s = stack(FULFILMENT_ACTION=downstream.url, METRICS_TOKEN=METRICS_TOKEN)
        web = s.start_web()
        s.start_worker()
        s.start_sweeper()
        prom = Prometheus(tmp_path / "prometheus", f"127.0.0.1:{web.port}", METRICS_TOKEN)
        prom.start()
        try:
            # Scraped with the token: the ledger's figures arrive, and all is quiet.
            wait_until(lambda: prom.query("webhook_ledger_up == 1"), 60, 0.2, "a scrape")
            assert prom.query('up{job="stripe-webhook"}')[0]["value"][1] == "1"
            assert not firing_or_pending(prom, "WebhookPaymentsNeedAPerson")

            paid = samples.payment_events(rng)[2]
            body = samples.encode(paid)
            assert s.send(body).status_code == 200
            wait_until(lambda: settled_as(redis, payment_key_of(paid), "failed"), 30)
            # Stripe's retry of it, once Prometheus has the first: deliveries keep verifying.
            wait_until(lambda: prom.query("sum(webhook_deliveries_total) >= 1"), 30, 0.2)
            assert s.send(body).status_code == 200
            forged = signed_headers(body, "whsec_forged_0123456789abcdef")
            with ThreadPoolExecutor(8) as pool:
                statuses = list(
                    pool.map(
                        lambda _: (
                            requests.post(
                                f"{web.url}/webhooks/stripe", data=body, headers=forged, timeout=30
                            ).status_code
                        ),
                        range(FORGED),
                    )
                )
            assert statuses == [400] * FORGED

            person = raised(prom, "WebhookPaymentsNeedAPerson", state="failed")
            forging = raised(prom, "WebhookSignatureFailures", cause="forged_requests")
            alerts = prom.alerts()
        finally:
            prom.stop()
    assert person["state"] in ("pending", "firing") and forging["state"] == "firing"
    assert person["annotations"]["summary"] == "1 payment(s) failed: they wait for a person"
    assert person["annotations"]["runbook_url"] == (
        f"{RUNBOOK_BASE}/docs/RUNBOOK.md#webhookpaymentsneedaperson"
    )
    assert (
        "unsigned or forged requests/s while deliveries verify"
        in (forging["annotations"]["summary"])
    )
    # None of the others fires (one may pend for a scrape slower than its 1 s timeout on a
    # busy machine: its rule's `for` is what keeps that from paging anyone).
    quiet = {"WebhookLedgerUnavailable", "WebhookWorkersDown", "WebhookMetricsDown"}
    assert not quiet & {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


def test_every_metric_the_rules_and_dashboard_use_is_exported(
    stack: Callable[..., Stack], redis: Redis, rng: Any, stripe_api: EventsApi
) -> None:
    s = stack(
        METRICS_TOKEN=METRICS_TOKEN,
        RECONCILE_INTERVAL="1",
        STRIPE_API_KEY=API_KEY,
        STRIPE_API_BASE=stripe_api.url,
    )
    web = s.start_web()
    s.start_worker()
    s.start_sweeper()
    paid = samples.payment_events(rng)[2]
    assert s.send(samples.encode(paid)).status_code == 200
    wait_until(lambda: settled_as(redis, payment_key_of(paid), "fulfilled"), 30)
    wait_until(lambda: stripe_api.requests, 30, what="a scheduled reconcile run")
    exported = wait_until(
        lambda: (n := scraped_names(web.url)) and "webhook_reconcile_missing" in n and n,
        30,
        what="the reconcile run's figures",
    )
    for source, used in used_metric_names().items():
        assert used, f"no metric name found in {source}"
        missing = used - exported
        assert not missing, f"{source} uses unexported {missing}"


def test_redis_killed_metrics_still_answer_and_the_503s_raise_an_alert(
    stack: Callable[..., Stack], rng: Any, tmp_path: Path
) -> None:
    own = RedisServer(tmp_path / "redis").start()  # killed below: not the suite's shared one
    try:
        s = stack(REDIS_URL=own.url, METRICS_TOKEN=METRICS_TOKEN)
        web = s.start_web()
        prom = Prometheus(tmp_path / "prometheus", f"127.0.0.1:{web.port}", METRICS_TOKEN)
        prom.start()
        try:
            wait_until(lambda: prom.query("webhook_ledger_up == 1"), 60, 0.2, "a scrape")
            own.kill()
            body = samples.encode(samples.payment_events(rng)[2])
            assert s.send(body).status_code == 503
            answer = requests.get(
                f"{web.url}/metrics",
                headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
                timeout=30,
            )
            assert answer.status_code == 200
            found = {
                (s.name, s.labels.get("reason")): s.value
                for f in text_string_to_metric_families(answer.text)
                for s in f.samples
            }
            assert found[("webhook_ledger_up", None)] == 0
            # Summed over gunicorn's worker processes (the client's multiprocess mode).
            assert found[("webhook_ledger_unavailable_responses_total", "unreachable")] == 1
            assert found[("webhook_ledger_unavailable_responses_total", "not_replicated")] == 0
            alert = raised(prom, "WebhookLedgerUnavailable", reason="unreachable")
        finally:
            prom.stop()
    finally:
        own.stop()
    assert alert["annotations"]["summary"].startswith("Deliveries answered 503 (unreachable)")
