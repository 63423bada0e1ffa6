"""Bulk decisions through the CLI and the ops API (in-process app, real Redis): the filters,
the dry run, resolve only as not applied, and a second run finding nothing left."""

import json

import pytest
from redis import Redis

from ledger import keys
from ledger.decisions import BadFilter, since_s
from tests.integration.test_ops import deliver
from tests.support.constants import BASIC, BEARER, OPS_TOKEN
from tests.support.helpers import cli_ok, fail_payment, run_cli, state_of
from webhook.http import csrf_token

CSRF = {**BEARER, "X-CSRF-Token": csrf_token(OPS_TOKEN)}


def called_long_ago(redis: Redis, payment_key: str) -> None:
    """Its (only) attempt's call started an hour ago and its process has ended (its liveness
    key is gone): it cannot be running any more."""
    pay = keys.payment(payment_key)
    record = json.loads(redis.hget(pay, "attempt:1"))
    record["calling"] -= 3600 * 1000
    redis.hset(pay, "attempt:1", json.dumps(record))
    if record.get("caller"):
        redis.delete(keys.caller(record["caller"]))


@pytest.mark.parametrize(("given", "seconds"), [("90s", 90), ("30m", 1800), ("1h30m", 5400)])
def test_durations(given: str, seconds: int) -> None:
    assert since_s(given) == seconds


@pytest.mark.parametrize("given", ["", "yesterday", "5", "-1h", "2h 3m"])
def test_malformed_durations_are_refused(given: str) -> None:
    with pytest.raises(BadFilter):
        since_s(given)


def test_resolve_retry_interrupted_with_a_dry_run_first(client, redis, rng, config) -> None:
    pks = [deliver(client, rng)["data"]["object"]["id"] for _ in range(3)]
    fail_payment(redis, config, pks[0], "interrupted")
    fail_payment(redis, config, pks[1], "interrupted")
    fail_payment(redis, config, pks[2])
    dry = run_cli(config, "resolve", "--retry", "--state", "interrupted", "--dry-run")
    assert cli_ok(dry) and "2 interrupted payment(s) match; dry run" in dry.output
    assert [state_of(redis, pk) for pk in pks] == ["interrupted", "interrupted", "failed"]
    early = run_cli(config, "resolve", "--retry", "--state", "interrupted")
    assert cli_ok(early) and "2 left alone: their last call may still be running" in early.output
    for pk in pks[:2]:
        called_long_ago(redis, pk)
    assert run_cli(config, "resolve", "--fulfilled", "--state", "interrupted").exit_code == 2
    assert run_cli(config, "resolve", "--retry", "--state", "failed").exit_code == 2
    done = run_cli(config, "resolve", "--retry", "--state", "interrupted")
    assert cli_ok(done) and "re-queued 2" in done.output
    assert [state_of(redis, pk) for pk in pks] == ["queued", "queued", "failed"]
    again = run_cli(config, "resolve", "--retry", "--state", "interrupted")
    assert cli_ok(again, 1) and "0 interrupted payment(s) match" in again.output


def test_the_api_bulk_retry_needs_csrf_with_basic_auth_and_applies_its_filters(
    client, redis, rng, config
) -> None:
    pks = [deliver(client, rng)["data"]["object"]["id"] for _ in range(2)]
    for pk in pks:
        fail_payment(redis, config, pk)
    url = "/ops/api/bulk/retry?state=failed"
    assert client.post(url, headers=BASIC).status_code == 403
    assert client.post(url + "&error=timeout", headers=BEARER).json["matched"] == 0
    dry = client.post(url + "&dry_run=1&since=1h", headers=CSRF).json
    assert dry["matched"] == 2 and dry["requeued"] == 0 and dry["dry_run"] is True
    done = client.post(url + "&error=HTTP%20400", headers=CSRF).json
    assert done["requeued"] == 2 and sorted(done["payment_keys"]) == sorted(pks)
    assert {state_of(redis, pk) for pk in pks} == {"queued"}
    assert client.post(url, headers=CSRF).json["matched"] == 0
    wrong = client.post("/ops/api/bulk/retry?state=fulfilled", headers=CSRF)
    assert wrong.status_code == 400 and wrong.json["error"] == "bad_argument"


def test_the_dashboard_lists_then_requeues_on_one_confirmed_post(
    client, redis, rng, config
) -> None:
    pks = [deliver(client, rng)["data"]["object"]["id"] for _ in range(2)]
    for pk in pks:
        fail_payment(redis, config, pk)
    listed = client.get("/ops/payments?state=failed", headers=BASIC).get_data(as_text=True)
    assert 'id="bulk-link"' in listed
    page = client.get("/ops/bulk?action=retry&state=failed&since=1h", headers=BASIC)
    text = page.get_data(as_text=True)
    assert "2 payment(s) match" in text and "Yes, re-queue these 2 payment(s)" in text
    assert {state_of(redis, pk) for pk in pks} == {"failed"}  # listing changes nothing
    form = {"state": "failed", "since": "1h", "error": ""}
    assert client.post("/ops/bulk/retry", data=form, headers=BASIC).status_code == 403
    form["csrf_token"] = csrf_token(OPS_TOKEN)
    done = client.post("/ops/bulk/retry", data=form, headers=BASIC).get_data(as_text=True)
    assert "Re-queued 2 of 2" in done
    assert {state_of(redis, pk) for pk in pks} == {"queued"}
    bad = client.get("/ops/bulk?action=retry&since=soon", headers=BASIC)
    assert bad.status_code == 400
