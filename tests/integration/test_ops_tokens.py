"""Labelled ops tokens: each person or system has its own OPS_TOKEN token, and what an
operator does is recorded under that token's label (``ops:LABEL`` from the API,
``dashboard:LABEL`` from the dashboard), never under the unauthenticated basic-auth user."""

import base64
import json

import pytest
from flask.testing import FlaskClient

from ledger import keys
from ledger.read import payments
from ledger.read.timeline import Resolution
from ledger.stored import ms_time
from tests.support.helpers import cli_ok, fail_payment, paid_event, run_cli, signed_headers
from webhook import create_app
from webhook.http import csrf_token

ALICE, BOB = "alice-token-0123", "bob-token-4567"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def basic(user: str, token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


def acting(token: str) -> dict[str, str]:
    """The API headers of a change made with ``token``: its bearer token and nothing else (a
    browser never sends a bearer token by itself, so no CSRF token is asked for)."""
    return bearer(token)


@pytest.fixture
def labelled(config) -> dict[str, object]:
    return {**config, "OPS_TOKEN": f"{ALICE},{BOB}", "OPS_TOKEN_LABELS": "alice,bob"}


@pytest.fixture
def ops(labelled, redis) -> FlaskClient:
    return create_app(labelled).test_client()


def failed_payment(ops: FlaskClient, redis, config, rng) -> str:
    event, body = paid_event(rng)
    assert ops.post("/webhooks/stripe", data=body, headers=signed_headers(body)).status_code == 200
    pk = event["data"]["object"]["id"]
    fail_payment(redis, config, pk)
    return pk


def test_a_pause_shows_the_label_of_the_token_that_made_it(ops, labelled) -> None:
    paused = ops.post("/ops/api/fulfilment/pause?reason=ERP+deploy", headers=acting(BOB))
    assert paused.status_code == 200 and paused.json["paused"]["by"] == "ops:bob"
    assert ops.get("/ops/api/fulfilment", headers=bearer(ALICE)).json["paused"]["by"] == "ops:bob"
    status = run_cli(labelled, "fulfilment", "status", "--json")
    assert cli_ok(status) and json.loads(status.output)["paused"]["by"] == "ops:bob"
    assert "ops:bob" in run_cli(labelled, "fulfilment", "status").output
    page = ops.get("/ops/fulfilment", headers=basic("alice", ALICE)).get_data(as_text=True)
    assert '<td id="paused-by">ops:bob</td>' in page


def test_the_dashboard_records_the_token_label_not_the_basic_auth_user(ops) -> None:
    form = {"csrf_token": csrf_token(ALICE)}
    pause = ops.post("/ops/fulfilment/pause", data=form, headers=basic("mallory", ALICE))
    assert pause.status_code == 303
    assert ops.get("/ops/api/fulfilment", headers=bearer(BOB)).json["paused"]["by"] == (
        "dashboard:alice"
    )
    resume = ops.post("/ops/fulfilment/resume", data=form, headers=basic("", ALICE))
    assert resume.status_code == 303
    status = ops.get("/ops/api/fulfilment", headers=bearer(BOB)).json
    assert status["paused"] is None and status["resumed_by"] == "dashboard:alice"


def test_each_token_has_its_own_csrf_token(ops) -> None:
    url = "/ops/api/fulfilment/pause"
    forged = {**basic("bob", BOB), "X-CSRF-Token": csrf_token(ALICE)}
    assert ops.post(url, headers=forged).status_code == 403
    assert ops.post(url, headers=basic("bob", BOB)).status_code == 403
    assert ops.post(url, headers={**basic("bob", BOB), "X-CSRF-Token": csrf_token(BOB)}).json[
        "paused"
    ]["by"] == ("ops:bob")
    page = ops.get("/ops/fulfilment", headers=basic("x", BOB)).get_data(as_text=True)
    assert csrf_token(BOB) in page and csrf_token(ALICE) not in page


@pytest.mark.parametrize(
    "header",
    [
        "Bearer nope",
        f"Bearer {ALICE},{BOB}",  # the setting's text is not a token
        f"Bearer {ALICE[:-1]}",
        f"Bearer {ALICE} {BOB}",
        "Basic " + base64.b64encode("ops:tökén".encode()).decode(),
        "Basic " + base64.b64encode(b"ops:\xff\xfe").decode(),
    ],
)
def test_a_wrong_token_is_401_on_the_api_and_the_dashboard(ops, header: str) -> None:
    for path in ("/ops/api/fulfilment", "/ops/fulfilment"):
        answer = ops.get(path, headers={"Authorization": header})
        assert answer.status_code == 401, (path, header)
    assert ops.post("/ops/api/fulfilment/pause", headers={"Authorization": header}).status_code == (
        401
    )


def test_a_bearer_token_needs_no_csrf_token_basic_auth_does(ops) -> None:
    """A browser repeats basic auth on its own (so a page from another site could make it
    post), never a bearer token."""
    assert ops.post("/ops/api/fulfilment/pause", headers=bearer(ALICE)).status_code == 200
    assert ops.post("/ops/api/fulfilment/resume", headers=basic("a", ALICE)).status_code == 403
    assert ops.post("/ops/fulfilment/resume", headers=basic("a", ALICE)).status_code == 403
    assert ops.post("/ops/api/fulfilment/resume", headers=bearer(ALICE)).status_code == 200


def test_retries_and_resolutions_record_the_token_label(ops, redis, config, rng) -> None:
    pk = failed_payment(ops, redis, config, rng)
    assert ops.post(f"/ops/api/payments/{pk}/retry", headers=acting(BOB)).status_code == 200
    assert ops.get(f"/ops/api/payments/{pk}", headers=bearer(ALICE)).json["resolution"]["by"] == (
        "ops:bob"
    )
    pk = failed_payment(ops, redis, config, rng)
    form = {"csrf_token": csrf_token(ALICE)}
    done = ops.post(f"/ops/payments/{pk}/retry", data=form, headers=basic("mallory", ALICE))
    assert done.status_code == 303
    assert ops.get(f"/ops/api/payments/{pk}", headers=bearer(BOB)).json["resolution"]["by"] == (
        "dashboard:alice"
    )


def test_a_decision_is_stored_as_fields_and_shown_from_them(ops, redis, config, rng) -> None:
    """Who decided, when, what and from which state: one hash field each (operator.lua),
    read back as they are and formatted only where shown."""
    pk = failed_payment(ops, redis, config, rng)
    assert ops.post(f"/ops/api/payments/{pk}/retry", headers=acting(BOB)).status_code == 200
    names = ("resolved_by", "resolved_at", "resolved_decision", "resolved_from", "resolved_as")
    by, at, decision, from_state, did = redis.hmget(keys.payment(pk), names)
    assert (by, decision, from_state, did) == (b"ops:bob", b"retry", b"failed", b"retry")
    record = payments.payment(redis, pk)
    assert record is not None and record.resolution == Resolution(
        by="ops:bob", at=ms_time(at), decision="retry", from_state="failed", meant="run again"
    )
    page = ops.get(f"/ops/payments/{pk}", headers=basic("any", ALICE)).get_data(as_text=True)
    assert "ops:bob: run again (was failed) at" in page


def test_bulk_retries_record_the_token_label(ops, redis, config, rng) -> None:
    first = failed_payment(ops, redis, config, rng)
    done = ops.post("/ops/api/bulk/retry?state=failed", headers=acting(BOB))
    assert done.json["payment_keys"] == [first]
    second = failed_payment(ops, redis, config, rng)
    form = {"state": "failed", "csrf_token": csrf_token(ALICE)}
    assert (
        ops.post("/ops/bulk/retry", data=form, headers=basic("mallory", ALICE)).status_code == 200
    )
    by = {
        pk: ops.get(f"/ops/api/payments/{pk}", headers=bearer(BOB)).json for pk in (first, second)
    }
    assert by[first]["resolution"]["by"] == "ops:bob"
    assert by[second]["resolution"]["by"] == "dashboard:alice"


def test_metrics_take_any_ops_token_unless_metrics_token_is_set(labelled, redis) -> None:
    ops = create_app(labelled).test_client()
    assert ops.get("/metrics", headers=bearer(BOB)).status_code == 200
    assert ops.get("/metrics", headers=bearer("nope")).status_code == 401
    separate = create_app({**labelled, "METRICS_TOKEN": "metrics-only"}).test_client()
    assert separate.get("/metrics", headers=bearer(BOB)).status_code == 401
    assert separate.get("/metrics", headers=bearer("metrics-only")).status_code == 200
