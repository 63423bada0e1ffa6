"""Every ops write (a decision, a bulk run, a pause) when its write cannot stand on enough
replicas, on a real redis-server without replicas: fewer than LEDGER_MIN_REPLICAS confirm
it (``NotReplicated``), or Redis itself refuses it (``min-replicas-to-write``: NOREPLICAS).
The ops API answers 503 JSON, the dashboard a 503 page; never a 500 or a traceback."""

import logging
import random
from collections.abc import Iterator

import pytest
from redis import Redis

from ledgerctl import samples
from tests.integration.test_decisions import called_long_ago
from tests.integration.test_ops import deliver
from tests.support.constants import BASIC, BEARER, OPS_TOKEN, SECRET
from tests.support.helpers import fail_payment, signed_headers
from tests.support.processes import free_port
from webhook import create_app
from webhook.http import csrf_token
from webhook.metrics_alerting import UNAVAILABLE_RESPONSES

CSRF = {"X-CSRF-Token": csrf_token(OPS_TOKEN)}
WRITES = {  # route under /ops/api/ and /ops/ -> the state its payment is put in first
    "payments/{pk}/retry": "failed",
    "payments/{pk}/resolve?as=retry": "interrupted",
    "bulk/retry": "failed",
    "fulfilment/pause": None,
}
REFUSALS = {"min_replicas": "not_replicated", "noreplicas": "ledger_unavailable"}


@pytest.fixture(params=list(REFUSALS))
def refusing(
    request: pytest.FixtureRequest, config: dict[str, object], redis: Redis
) -> Iterator[tuple[dict[str, object], str]]:
    """The test's config and how its writes are refused: ``min_replicas``
    (LEDGER_MIN_REPLICAS=1, no replica confirms) or ``noreplicas`` (Redis's own
    min-replicas-to-write 1, set after the test has put its payments in place)."""
    if request.param == "min_replicas":
        yield {**config, "LEDGER_MIN_REPLICAS": 1, "LEDGER_WAIT_TIMEOUT": 0.05}, request.param
        return
    yield config, request.param
    redis.config_set("min-replicas-to-write", 0)


def refuse_from_now(redis: Redis, how: str) -> None:
    if how == "noreplicas":
        redis.config_set("min-replicas-to-write", 1)


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info], "an exception was logged"


def payment_in(redis: Redis, config: dict, state: str | None) -> str:
    """A payment put in ``state`` while writes still stand (None: no payment needed)."""
    if state is None:
        return "pi_none"
    confirmed = {k: v for k, v in config.items() if not k.startswith("LEDGER_")}
    pk = deliver(create_app(confirmed).test_client(), random.Random(7))["data"]["object"]["id"]
    fail_payment(redis, config, pk, state)
    if state == "interrupted":
        called_long_ago(redis, pk)  # else its resolve is refused without writing anything
    return pk


@pytest.mark.parametrize("route", list(WRITES))
def test_an_api_write_not_replicated_answers_503_json(
    refusing: tuple[dict[str, object], str],
    redis: Redis,
    route: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config, how = refusing
    client = create_app(config).test_client()
    pk = payment_in(redis, config, WRITES[route])
    refuse_from_now(redis, how)
    with caplog.at_level(logging.INFO):
        answer = client.post(f"/ops/api/{route.format(pk=pk)}", headers={**BEARER, **CSRF})
    assert answer.status_code == 503, answer.get_data(as_text=True)
    assert answer.mimetype == "application/json"
    body = answer.get_json()
    assert body["error"] == REFUSALS[how]
    said = "confirmed by 0 of 1 replicas" if how == "min_replicas" else "NOREPLICAS"
    assert said in body["message"]
    no_traceback(caplog)


@pytest.mark.parametrize("route", [r for r in WRITES if r != "fulfilment/pause"])
def test_a_dashboard_write_not_replicated_answers_a_503_page(
    refusing: tuple[dict[str, object], str],
    redis: Redis,
    route: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The dashboard's pause page says it itself (tests/integration/test_pause.py)."""
    config, how = refusing
    client = create_app(config).test_client()
    pk = payment_in(redis, config, WRITES[route])
    refuse_from_now(redis, how)
    path, _, query = route.format(pk=pk).partition("?")
    form = {"csrf_token": csrf_token(OPS_TOKEN), **dict([query.split("=")] if query else [])}
    with caplog.at_level(logging.INFO):
        page = client.post(f"/ops/{path}", data=form, headers=BASIC)
    assert page.status_code == 503 and page.mimetype == "text/html"
    said = "confirmed by 0 of 1 replicas" if how == "min_replicas" else "NOREPLICAS"
    assert said in page.get_data(as_text=True)
    no_traceback(caplog)


@pytest.mark.parametrize(("how", "reason"), [("min_replicas", "not_replicated"),
                                             ("noreplicas", "too_few_replicas")])  # fmt: skip
def test_a_delivery_refused_for_want_of_replicas_is_counted_by_its_reason(
    config: dict[str, object], redis: Redis, how: str, reason: str
) -> None:
    """`webhook_ledger_unavailable_responses_total{reason}`: NOREPLICAS (Redis's own
    min-replicas-to-write, config/replication.conf) was counted as `other`."""
    if how == "min_replicas":
        config = {**config, "LEDGER_MIN_REPLICAS": 1, "LEDGER_WAIT_TIMEOUT": 0.05}
    client = create_app(config).test_client()
    counted = UNAVAILABLE_RESPONSES.labels(reason)._value.get()
    refuse_from_now(redis, how)
    try:
        body = samples.encode(samples.payment_events(random.Random(3))[2])
        answer = client.post("/webhooks/stripe", data=body, headers=signed_headers(body))
    finally:
        redis.config_set("min-replicas-to-write", 0)
    assert answer.status_code == 503 and answer.get_json()["error"] == "ledger_unavailable"
    assert UNAVAILABLE_RESPONSES.labels(reason)._value.get() == counted + 1


def test_with_sentinels_a_503_names_the_sentinels_not_redis_url(redis: Redis) -> None:
    """REDIS_URL is unused (and left at its default) when REDIS_SENTINELS is set."""
    sentinel = f"127.0.0.1:{free_port()}"
    app = create_app(
        {"REDIS_SENTINELS": sentinel, "STRIPE_WEBHOOK_SECRET": SECRET, "OPS_TOKEN": OPS_TOKEN}
    )
    answer = app.test_client().get("/ops/api/summary", headers=BEARER)
    assert answer.status_code == 503 and answer.get_json()["error"] == "ledger_unavailable"
    message = answer.get_json()["message"]
    assert f"the Sentinels at {sentinel}" in message and "redis://" not in message
