"""Requests no view takes, on any path: a path no route has, a method its route does not
take, a request without the ops token. Each is a JSON 4xx with its reason, counted as a
rejection in memory only (no key per request, nothing fsynced), like a forged delivery.
Over real HTTP, through gunicorn: tests/system/test_hostile_http.py."""

import json

import pytest

from ledger import keys
from tests.support.constants import BEARER
from tests.support.helpers import stats


def aof_bytes(redis) -> int:
    return int(redis.info("persistence")["aof_current_size"])


def assert_counted(answer, redis, reason: str, status: int) -> dict:
    assert answer.status_code == status, answer.get_data()[:300]
    assert answer.mimetype == "application/json"
    assert answer.get_json()["error"] == reason
    assert stats(redis) == {"rejected": 1, f"rejected:{reason}": 1}
    record = json.loads(redis.lindex(keys.REJECTIONS, 0))
    assert record["reason"] == reason and record["status"] == status
    return answer.get_json()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/webhooks/stripe/"),
        ("POST", "/webhooks//stripe"),  # not Werkzeug's 308 redirect (merge_slashes)
        ("POST", "/webhooks/stripe//"),
        ("GET", "/nope"),
        ("OPTIONS", "*"),
        ("GET", "/ops/nope"),
        ("POST", "/ops"),
        ("GET", "/.env"),
    ],
)
def test_a_path_no_route_takes_is_a_counted_json_404(client, redis, method, path) -> None:
    answer = client.open(path, method=method, environ_overrides={"PATH_INFO": path})
    assert assert_counted(answer, redis, "unknown_path", 404)["detail"] == "no such path"


def test_in_the_ops_api_it_is_the_apis_problem(client, redis) -> None:
    answer = client.get("/ops/api/nope", headers=BEARER)
    problem = assert_counted(answer, redis, "unknown_path", 404)
    assert problem == {"error": "unknown_path", "message": "no such path"}


def test_a_views_own_404_is_not_a_rejection(client, redis) -> None:
    """A record the ops API or the dashboard does not have: an answer to an operator."""
    assert client.get("/ops/api/events/evt_nope", headers=BEARER).status_code == 404
    assert client.get("/ops/events/evt_nope", headers=BEARER).status_code == 404
    assert "rejected" not in stats(redis)


@pytest.mark.parametrize(
    ("method", "path", "said"),
    [("PUT", "/healthz", "detail"), ("DELETE", "/ops/api/summary", "message")],
)
def test_a_method_the_route_does_not_take_is_counted(client, redis, method, path, said) -> None:
    """In the ops API as its Problem (``message``), elsewhere as any rejection (``detail``)."""
    answer = client.open(path, method=method, headers=BEARER)
    assert (
        assert_counted(answer, redis, "method_not_allowed", 405)[said] == "use GET, HEAD, OPTIONS"
    )
    assert answer.headers["Allow"] == "GET, HEAD, OPTIONS"


@pytest.mark.parametrize("path", ["/ops/api/summary", "/ops/", "/metrics"])
def test_a_request_without_the_token_is_counted(client, redis, path) -> None:
    assert_counted(client.get(path), redis, "unauthorized", 401)


def test_a_scanner_flood_costs_no_key_and_no_append_only_file_write(client, redis) -> None:
    client.get("/nope")  # the scripts are loaded and the counters exist
    keys_before, aof_before = redis.dbsize(), aof_bytes(redis)
    for n in range(3_000):
        client.open(f"/scan/{n}", method=("GET", "POST", "OPTIONS")[n % 3])
    assert stats(redis)["rejected:unknown_path"] == 3_001
    assert redis.dbsize() <= keys_before + 1  # + 1: the loop may cross into the next hour
    assert aof_bytes(redis) - aof_before < 1024
