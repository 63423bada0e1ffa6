"""The metrics the alerting rules watch (deploy/prometheus/alerts.yml), read from a real
Redis through the app: waiting ages, attempt outcomes, workers, sweeper, replicas, and the
503s, which /metrics still reports with Redis down (``webhook_ledger_up 0``)."""

from datetime import UTC, datetime
from typing import Any

from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis

from ledger import health, keys
from ledgerctl import samples
from tests.support.constants import BEARER
from tests.support.helpers import payment_key_of, signed_headers
from tests.support.inprocess import app_without_redis
from tests.support.processes import RedisServer
from webhook.metrics_alerting import UNAVAILABLE_RESPONSES
from workers.sweeper import mark_schedule


def scrape(client: FlaskClient) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    answer = client.get("/metrics", headers=BEARER)
    assert answer.status_code == 200
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(answer.get_data(as_text=True)):
        for s in family.samples:
            found.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return found


def test_waiting_ages_outcomes_and_schedule(
    client: FlaskClient, redis: Any, config: dict[str, object], fulfilment: Any, rng: Any
) -> None:
    f = fulfilment(RECONCILE_INTERVAL="600", STRIPE_API_KEY="rk_test_x")
    event = samples.payment_events(rng)[2]
    f.deliver(event)
    pk = payment_key_of(event)
    seconds, _ = redis.time()
    # It entered ``queued`` 90 s ago (the index's score is when the state began).
    redis.zadd(keys.state_index("queued"), {pk: (seconds - 90) * 1000})
    mark_schedule(f.attempts)
    m = scrape(client)
    assert m["webhook_ledger_up"][()] == 1
    ages = {dict(k)["state"]: v for k, v in m["webhook_payments_oldest_age_seconds"].items()}
    assert 90 <= ages["queued"] < 120
    assert ages["held"] == ages["failed"] == ages["retrying"] == 0
    assert m["webhook_queue_oldest_age_seconds"][()] >= 0
    assert m["webhook_reconcile_interval_seconds"][()] == 600
    assert m["webhook_ledger_min_replicas"][()] == 0
    assert m["webhook_ledger_replicas_online"][()] == 0
    assert m["webhook_workers_alive"][()] == 0  # none runs: in-process burst workers only
    assert m["webhook_ledger_memory_used_bytes"][()] > 0
    most = int(redis.config_get("maxmemory")["maxmemory"])
    assert m["webhook_ledger_memory_max_bytes"][()] == most
    f.work()
    m = scrape(client)
    outcomes = {
        dict(k)["outcome"]: v for k, v in m["webhook_fulfil_attempt_outcomes_total"].items()
    }
    assert outcomes == {
        "fulfilled": 1,
        "retry": 0,
        "failed": 0,
        "interrupted": 0,
        "not_called": 0,
        "voided": 0,
        "held": 0,
    }
    assert m["webhook_payments_oldest_age_seconds"][(("state", "queued"),)] == 0


def test_metrics_answer_with_redis_down_and_count_the_503s(rng: Any) -> None:
    down = app_without_redis().test_client()
    before = UNAVAILABLE_RESPONSES.labels("unreachable")._value.get()
    body = samples.encode(samples.payment_events(rng)[2])
    answer = down.post("/webhooks/stripe", data=body, headers=signed_headers(body))
    assert answer.status_code == 503
    assert UNAVAILABLE_RESPONSES.labels("unreachable")._value.get() == before + 1
    m = scrape(down)
    assert m["webhook_ledger_up"][()] == 0
    assert m["webhook_ledger_unavailable_responses_total"][(("reason", "unreachable"),)] >= 1
    assert "webhook_deliveries_total" not in m  # nothing read from the ledger is made up


def test_the_latency_histogram_counts_buckets_another_release_wrote(
    client: FlaskClient, redis: Any
) -> None:
    """A rolling deploy or a rollback: workers of another release count into bounds this one
    does not export (le:45000, le:600000). Each goes into the first bound above it, so
    +Inf and the count never drop (Prometheus would take a drop for a counter reset)."""
    redis.hset(
        keys.FULFIL_HISTOGRAM,
        mapping={"le:100": 2, "le:45000": 3, "le:90000": 1, "le:600000": 4, "le:inf": 1},
    )
    buckets = {
        dict(k)["le"]: v for k, v in scrape(client)["webhook_fulfil_latency_seconds_bucket"].items()
    }
    assert (buckets["0.1"], buckets["30.0"], buckets["60.0"], buckets["90.0"]) == (2, 2, 5, 6)
    assert buckets["300.0"] == 6 and buckets["+Inf"] == 11


def test_health_without_info_and_in_one_round_trip(tmp_path: Any) -> None:
    """A managed Redis may forbid INFO: the replica and memory figures are None, the rest is
    read all the same; and the whole of it is one pipeline, one round trip a scrape."""
    server = RedisServer(tmp_path / "no-info", extra=["--rename-command", "INFO", ""]).start()
    redis = Redis.from_url(server.url)
    try:
        redis.zadd(keys.state_index("retrying"), {"pi_x": 1_000})
        sent: list[int] = []
        real = redis.connection_pool.get_connection

        def counted(*args: Any, **kwargs: Any) -> Any:
            sent.append(1)
            return real(*args, **kwargs)

        redis.connection_pool.get_connection = counted  # type: ignore[method-assign]
        found = health.health(redis, datetime.fromtimestamp(61, UTC))
    finally:
        redis.close()
        server.stop()
    assert (found.replicas_online, found.memory_used_bytes, found.memory_max_bytes) == (
        None,
        None,
        None,
    )
    assert found.oldest_age_s["retrying"] == 60.0 and found.oldest_age_s["queued"] == 0.0
    assert found.attempt_outcomes["fulfilled"] == 0 and sent == [1]
    assert found.run_id == ""  # rejections then one series: a step back reads as a reset


def test_jobs_enqueued_again_are_counted_by_why(
    client: FlaskClient, redis: Any, fulfilment: Any, rng: Any
) -> None:
    """The scale review: the sweeper's requeues (1,050 healthy jobs taken for lost in one
    pass) showed nowhere but in Redis."""
    f = fulfilment()
    event = samples.payment_events(rng)[2]
    f.deliver(event)
    pk = payment_key_of(event)
    before = scrape(client)["webhook_jobs_requeued_total"]
    assert before == {(("reason", r),): 0 for r in health.REQUEUE_REASONS}
    redis.delete(keys.rq_queue(f.settings.QUEUE_NAME))  # taken by a worker that then died
    assert f.attempts.recover(pk) == "requeued"
    after = scrape(client)["webhook_jobs_requeued_total"]
    assert after[(("reason", "lost_job"),)] == 1 and sum(after.values()) == 1
