"""Rejections are counted in memory only (a forged request costs no fsync), and each
sweeper pass puts those counted since the last on disk and on the replicas: a Redis
restarted from its append-only file keeps them up to the last pass. Before, only an AOF
rewrite kept them, so a clean restart (or a failover) showed 0 rejections and an empty
list, and the runbook's `webhook-ledger rejections` had nothing to show."""

from pathlib import Path

from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from ledger import keys, settings
from ledger.attempts import Attempts
from tests.support.constants import BEARER
from tests.support.helpers import stats
from tests.support.processes import RedisServer
from webhook import create_app
from workers.sweeper import sweep_once

FORGED = {"Content-Type": "application/json", "Stripe-Signature": "t=1,v1=00"}


def restarted(server: RedisServer, redis: Redis) -> Redis:
    """A clean stop (SHUTDOWN) and a start on the same folder: what its AOF holds."""
    try:
        redis.shutdown(nosave=True)
    except RedisConnectionError:
        pass  # the connection closes as it stops
    server.stop()
    server.start()
    return server.client()


def minutes(redis: Redis) -> int:
    return sum(
        int(value)
        for key in redis.scan_iter(keys.SERIES_PREFIX + "*")
        for field, value in redis.hgetall(key).items()
        if field.startswith(b"r:")
    )


def test_rejections_kept_by_a_sweep_survive_a_restart(
    config: dict[str, object], tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "redis").start()
    redis = server.client()
    try:
        env = {**config, "REDIS_URL": server.url}
        client = create_app(env).test_client()
        for n in range(5):
            answer = client.post("/webhooks/stripe", data=b'{"id": "evt_%d"}' % n, headers=FORGED)
            assert answer.status_code == 400
        attempts = Attempts(redis, settings.load({k: str(v) for k, v in env.items()}))
        assert sweep_once(attempts)["rejections_kept"] == 5
        assert attempts.keep_rejections() == 0  # nothing new since
        listed = redis.lrange(keys.REJECTIONS, 0, -1)
        client.post("/webhooks/stripe", data=b'{"id": "evt_late"}', headers=FORGED)  # not kept
        redis = restarted(server, redis)
        assert stats(redis)["rejected"] == 5
        assert stats(redis)["rejected:signature_mismatch"] == 5
        assert redis.lrange(keys.REJECTIONS, 0, -1) == listed  # same records, same order
        assert minutes(redis) == 5
        client = create_app(env).test_client()
        client.post("/webhooks/stripe", data=b'{"id": "evt_after"}', headers=FORGED)
        attempts = Attempts(redis, attempts.settings)
        assert attempts.keep_rejections() == 1
        redis = restarted(server, redis)
        assert stats(redis)["rejected"] == 6 and redis.llen(keys.REJECTIONS) == 6
    finally:
        redis.close()
        server.stop()


def rejection_series(client: FlaskClient) -> dict[str, float]:
    """/metrics' signature mismatches by ledger_run."""
    answer = client.get("/metrics", headers=BEARER)
    assert answer.status_code == 200
    return {
        s.labels["ledger_run"]: s.value
        for f in text_string_to_metric_families(answer.get_data(as_text=True))
        for s in f.samples
        if s.name == "webhook_rejections_total" and s.labels["reason"] == "signature_mismatch"
    }


def test_counts_stepped_back_by_a_restart_are_another_series_in_metrics(
    config: dict[str, object], tmp_path: Path
) -> None:
    """Prometheus reads a counter that steps back as a reset and counts its whole value as
    new (a false burst of forged requests); the restarted server's counts are a series of
    their own instead (ledger_run: its run_id), which the alerting rules sum over."""
    server = RedisServer(tmp_path / "redis").start()
    redis = server.client()
    try:
        env = {**config, "REDIS_URL": server.url}
        client = create_app(env).test_client()
        for n in range(3):
            client.post("/webhooks/stripe", data=b'{"id": "evt_%d"}' % n, headers=FORGED)
        Attempts(redis, settings.load({k: str(v) for k, v in env.items()})).keep_rejections()
        client.post("/webhooks/stripe", data=b'{"id": "evt_late"}', headers=FORGED)  # not kept
        ((before, count),) = rejection_series(client).items()
        assert count == 4 and before == redis.info("server")["run_id"][:12]
        redis = restarted(server, redis)
        client = create_app(env).test_client()
        ((after, count),) = rejection_series(client).items()
        assert count == 3 and after == redis.info("server")["run_id"][:12] != before
        client.post("/webhooks/stripe", data=b'{"id": "evt_after"}', headers=FORGED)
        assert rejection_series(client) == {after: 4}
    finally:
        redis.close()
        server.stop()
