"""Credentials in a downstream's error never reach a surface: the payment in Redis, the API,
the dashboard, a bundle, the CLI, or any process's log (real processes and a real refusal)."""

import random
import subprocess
import sys

import requests

from ledger import keys
from ledgerctl import samples
from tests.support.constants import BASIC, BEARER
from tests.support.helpers import payment_key_of
from tests.support.processes import free_port, wait_until
from tests.unit.test_redact import CAPABILITY, SECRETS


def test_refused_connection_error_is_stored_and_shown_redacted(stack, redis, tmp_path) -> None:
    """A refused connection once stored ``url: /fulfil?api_key=SECRET123``; a capability
    URL's path and ;params too. Every surface names the downstream by its origin only."""
    port = free_port()  # nothing listens: ConnectionError, retried (never sent), then waits
    action = f"http://user:PASSWORD456@127.0.0.1:{port}{CAPABILITY}"
    s = stack(FULFILMENT_ACTION=action, MAX_ATTEMPTS="2")
    web = s.start_web()
    s.start_worker()
    s.start_sweeper()
    event = samples.payment_events(random.Random(3))[2]
    s.send(samples.encode(event))
    pk = payment_key_of(event)
    wait_until(lambda: b"ConnectionError" in (redis.hget(keys.payment(pk), "last_error") or b""))
    wait_until(lambda: redis.hget(keys.BREAKER, "last_error") is not None)
    stored = b" ".join(
        b"=".join(kv)
        for key in (keys.payment(pk), keys.BREAKER)
        for kv in redis.hgetall(key).items()
    ).decode()
    named = f"ConnectionError (Connection refused) calling http://127.0.0.1:{port}"
    assert named in stored and "/hooks" not in stored
    api = requests.get(f"{web.url}/ops/api/payments/{pk}", headers=BEARER, timeout=10).text
    page = requests.get(f"{web.url}/ops/payments/{pk}", headers=BASIC, timeout=10).text
    index = requests.get(f"{web.url}/ops/", headers=BASIC, timeout=10).text
    assert named in api and named in page
    cli = [sys.executable, "-m", "ledgerctl.cli"]
    subprocess.run([*cli, "export", str(tmp_path / "b")], env=s.env, check=True)
    exported = " ".join(p.read_text() for p in (tmp_path / "b").iterdir())
    shown = subprocess.run([*cli, "payment", pk], env=s.env, capture_output=True, text=True)
    logs = " ".join(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))
    for text in (stored, api, page, index, exported, shown.stdout, logs):
        assert not any(secret in text for secret in SECRETS)
