"""Redis down (or refusing writes) while the web process runs: the ops API answers 503 JSON
saying what is wrong, the dashboard a 503 page; never a traceback or a generic 500 (/metrics
answers 200 with ``webhook_ledger_up 0``: tests/integration/test_metrics_alerting.py). The
Stripe endpoint keeps its own answers (503 ledger_unavailable for a delivery, 400 for a
forgery)."""

import html
import logging
import random
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from redis.exceptions import ResponseError

from ledgerctl import samples
from tests.support.constants import BASIC, BEARER, OPS_TOKEN, SECRET
from tests.support.helpers import signed_headers
from tests.support.inprocess import app_without_redis
from tests.support.processes import ROOT, RedisServer, free_port, wait_until
from webhook import create_app
from webhook.http import csrf_token
from webhook.metrics_alerting import UNAVAILABLE_RESPONSES

API = ["summary", "events", "events/evt_1", "payments", "payments/pi_1", "rejections", "series"]
API += ["secrets", "reconcile"]
PAGES = ["", "events", "events/evt_1", "payments", "payments/pi_1"]


@pytest.fixture
def down() -> FlaskClient:
    return app_without_redis().test_client()


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info], "an exception was logged"


@pytest.mark.parametrize("path", [f"/ops/api/{p}" for p in API])
def test_api_answers_503_json(
    down: FlaskClient, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        answer = down.get(path, headers=BEARER)
    assert answer.status_code == 503 and answer.mimetype == "application/json"
    body = answer.get_json()
    assert body["error"] == "ledger_unavailable"
    retry_after = datetime.fromisoformat(body["retry_after"])
    assert timedelta(0) < retry_after - datetime.now(UTC) <= timedelta(seconds=5)
    assert "the ledger's Redis at redis://127.0.0.1:" in body["message"]
    assert "Connection refused" in body["message"]
    assert answer.headers["Retry-After"] == "5"
    no_traceback(caplog)


def test_operating_md_shows_the_fields_the_api_answers(down: FlaskClient) -> None:
    """docs/OPERATING.md (Health) quotes the 503 body: its fields are the answer's."""
    text = (ROOT / "docs" / "OPERATING.md").read_text()
    example = re.search(r'`(\{"error": "ledger_unavailable",.*?\})`', text, re.S)
    assert example is not None, "OPERATING.md no longer quotes the 503 body"
    body = down.get("/ops/api/summary", headers=BEARER).get_json()
    assert set(re.findall(r'"(\w+)":', example[1])) == set(body)


@pytest.mark.parametrize("page", PAGES)
def test_dashboard_pages_answer_a_503_page(
    down: FlaskClient, page: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        answer = down.get(f"/ops/{page}", headers=BASIC)
    assert answer.status_code == 503 and answer.mimetype == "text/html"
    text = answer.get_data(as_text=True)
    assert "503: the ledger is unavailable" in text and "Connection refused" in text
    assert answer.headers["X-Frame-Options"] == "DENY"  # the dashboard's own headers still apply
    no_traceback(caplog)


def test_the_503_names_redis_without_its_password(caplog: pytest.LogCaptureFixture) -> None:
    """A password with a quote ended the old mask's match: the JSON, the page and the log
    showed it whole."""
    port = free_port()
    config = {"REDIS_URL": f'redis://:hun"ter2@127.0.0.1:{port}/0', "REDIS_RETRIES": 0}
    client = create_app({**config, "STRIPE_WEBHOOK_SECRET": SECRET, "OPS_TOKEN": OPS_TOKEN})
    with caplog.at_level(logging.INFO):
        body = client.test_client().get("/ops/api/summary", headers=BEARER).get_json()
        page = html.unescape(client.test_client().get("/ops/", headers=BASIC).text)
    where = f"the ledger's Redis at redis://***@127.0.0.1:{port}/0 cannot be used now"
    assert where in body["message"] and where in page and where in caplog.text
    for text in (body["message"], page, caplog.text):
        assert "ter2" not in text and "hun" not in text


def test_a_decision_answers_503_and_credentials_still_come_first(down: FlaskClient) -> None:
    csrf = {**BEARER, "X-CSRF-Token": csrf_token(OPS_TOKEN)}
    assert down.post("/ops/api/payments/pi_1/retry", headers=csrf).status_code == 503
    assert down.get("/ops/api/summary").status_code == 401
    assert down.get("/ops/").status_code == 401
    assert down.get("/metrics").status_code == 401


def test_the_stripe_endpoint_keeps_its_own_answers(down: FlaskClient) -> None:
    body = samples.encode(samples.payment_events(random.Random(1))[2])
    answer = down.post("/webhooks/stripe", data=body, headers=signed_headers(body))
    assert answer.status_code == 503 and answer.get_json()["error"] == "ledger_unavailable"
    forged = down.post("/webhooks/stripe", data=body, headers=signed_headers(body, "whsec_x"))
    assert forged.status_code == 400 and forged.get_json()["error"] == "signature_mismatch"
    assert down.get("/readyz").status_code == 503 and down.get("/healthz").status_code == 200


@pytest.fixture
def not_persisting(tmp_path: Path) -> Iterator[FlaskClient]:
    """The app on a real redis-server that answers every write MISCONF: its last RDB save
    failed (a directory has the RDB file's name; a full disk does the same) and
    stop-writes-on-bgsave-error is on, as Redis ships."""
    (tmp_path / "redis" / "blocked.rdb").mkdir(parents=True)
    server = RedisServer(tmp_path / "redis", extra=["--dbfilename", "blocked.rdb"]).start()
    try:
        redis = server.client()
        redis.bgsave()
        wait_until(
            lambda: redis.info("persistence")["rdb_last_bgsave_status"] == "err",
            30,
            what="a failed RDB save",
        )
        config = {"REDIS_URL": server.url, "STRIPE_WEBHOOK_SECRET": SECRET, "OPS_TOKEN": OPS_TOKEN}
        yield create_app(config).test_client()
    finally:
        server.kill()  # it would refuse SIGTERM: it cannot save on its way out


def test_a_redis_that_cannot_persist_is_unavailable(
    not_persisting: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    """redis-py raises MISCONF as a plain ResponseError; it is no bug of ours but Redis
    refusing writes: a delivery 503 (Stripe retries), an ops POST 503, never a 500."""
    body = samples.encode(samples.payment_events(random.Random(1))[2])
    counted = UNAVAILABLE_RESPONSES.labels("cannot_persist")._value.get()
    with caplog.at_level(logging.INFO):
        delivery = not_persisting.post("/webhooks/stripe", data=body, headers=signed_headers(body))
        assert delivery.status_code == 503
        assert delivery.get_json()["error"] == "ledger_unavailable"
        assert UNAVAILABLE_RESPONSES.labels("cannot_persist")._value.get() == counted + 1
        paused = not_persisting.post("/ops/api/fulfilment/pause", headers=BEARER)
        assert paused.status_code == 503 and paused.get_json()["error"] == "ledger_unavailable"
        assert "MISCONF" in paused.get_json()["message"]
        csrf = {**BASIC, "X-CSRF-Token": csrf_token(OPS_TOKEN)}
        page = not_persisting.post("/ops/fulfilment/pause", headers=csrf)
        assert page.status_code == 503 and "503: the ledger is unavailable" in page.text
    no_traceback(caplog)


def test_another_redis_error_is_still_a_bug(down: FlaskClient) -> None:
    """Only MISCONF among Redis's plain errors means the ledger is unavailable."""

    def fails() -> str:
        raise ResponseError("ERR wrong number of arguments for 'hset' command")

    down.application.add_url_rule("/ops/api/fails", view_func=fails)
    assert down.get("/ops/api/fails").status_code == 500
