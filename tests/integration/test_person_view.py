"""A payment that waits for a person, and one a person decided, as the CLI and the dashboard
show them: what to check and under which key, the two decisions as commands, and no stale
error or latency on a payment a person marked fulfilled."""

import json

from redis import Redis

from ledger import settings as settings_module
from ledger.attempts import Attempts
from tests.support.constants import BASIC
from tests.support.helpers import paid_event, run_cli, signed_headers, state_of
from webhook import create_app

ERROR = "http 500 from http://127.0.0.1:9301"


def paid(client, rng) -> str:
    event, body = paid_event(rng)
    assert client.post("/webhooks/stripe", data=body, headers=signed_headers(body)).status_code
    return event["data"]["object"]["id"]


def got_500(config: dict, payment_key: str) -> None:
    """A call of an action that is not replay-safe answered 500: ``interrupted``, no receipt."""
    s = settings_module.load({}, REDIS_URL=config["REDIS_URL"])
    attempts = Attempts(Redis.from_url(s.REDIS_URL), s)
    start = attempts.start(payment_key, "job-test", replay_safe=False)
    assert start.verdict == "go" and attempts.mark_calling(payment_key, start.token)
    assert attempts.finish(payment_key, start.token, "interrupted", ERROR, 3.0)[1] == "interrupted"


def test_a_payment_a_person_marked_fulfilled_lists_no_error_and_no_latency(
    client, redis, rng, config
) -> None:
    env = {k: str(v) for k, v in config.items()}
    pk = paid(client, rng)
    got_500(config, pk)
    assert run_cli(env, "resolve", pk, "--fulfilled").exit_code == 0
    assert state_of(redis, pk) == "fulfilled"
    row = json.loads(run_cli(env, "payments", "--json").stdout)["payments"][0]
    assert (row["fulfilled_by_hand"], row["paid_to_fulfilled_ms"]) == (True, None)
    assert row["last_error"] == ERROR  # kept as history; never shown as the reason
    table = run_cli(env, "payments").stdout
    assert "marked fulfilled by a person" in table and "http 500" not in table
    page = client.get("/ops/payments", headers=BASIC).get_data(as_text=True)
    assert "marked fulfilled by a person" in page and "http 500" not in page
    assert " ms</td>" not in page  # the paid → fulfilled column is empty


def test_the_cli_prints_the_next_step_of_an_interrupted_payment(client, redis, rng, config) -> None:
    env = {k: str(v) for k, v in config.items()}
    pk = paid(client, rng)
    assert "Next:" not in run_cli(env, "payment", pk).stdout  # queued: nothing to decide
    got_500(config, pk)
    shown = run_cli(env, "payment", pk)
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "The downstream may or may not have applied this payment. Check it, then:" in out
    assert f"idempotency key of its calls (what the downstream saw): fulfil:{pk}" in out
    assert f"webhook-ledger resolve {pk} --fulfilled  # It was applied: mark fulfilled" in out
    assert f"webhook-ledger resolve {pk} --retry      # It was not: run again" in out
    assert json.loads(run_cli(env, "payment", pk, "--json").stdout)["state"] == "interrupted"


def test_the_page_of_a_payment_elsewhere_says_what_to_check_and_under_which_key(
    config, redis, rng
) -> None:
    """Not the built-in SQLite downstream: no receipt after a 500, so none to check."""
    elsewhere = {**config, "FULFILMENT_ACTION": "http://127.0.0.1:9301/fulfil"}
    client = create_app(elsewhere).test_client()
    pk = paid(client, rng)
    got_500(config, pk)
    page = client.get(f"/ops/payments/{pk}", headers=BASIC).get_data(as_text=True)
    assert "check the receipt below" not in page and 'id="receipt"' not in page
    assert "no receipt came (the last error says why): look in your system for the " in page
    assert f"idempotency key fulfil:{pk}" in page
    assert (
        f'id="next-key">Idempotency key of its calls (what the downstream saw): <code>fulfil:{pk}<'
        in page
    )
    assert "It was applied: mark fulfilled" in page and "It was not: run again" in page
    done = paid(client, rng)
    s = settings_module.load({}, REDIS_URL=config["REDIS_URL"])
    attempts = Attempts(Redis.from_url(s.REDIS_URL), s)
    start = attempts.start(done, "job-test", replay_safe=True)
    attempts.finish(done, start.token, "fulfilled", json.dumps({"order": "o_1"}), 2.0)
    page = client.get(f"/ops/payments/{done}", headers=BASIC).get_data(as_text=True)
    assert (
        f"check the receipt below against your system for the idempotency key fulfil:{done}" in page
    )
    assert 'id="receipt"' in page and 'id="next-key"' not in page
