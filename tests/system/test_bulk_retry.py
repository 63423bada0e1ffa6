"""Bulk retry after a fix, with real gunicorn, RQ workers, sweeper and ``webhook-ledger`` in
their own processes: a dry run changes nothing, one command re-queues every failed payment
the filter selects, and two bulk runs at once queue each payment once."""

import json
import subprocess
import sys

from redis import Redis

from ledger import keys
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import paid_event, payment_key_of, state_of, stats
from tests.support.processes import service_env, wait_until


def cli(env: dict[str, str], *args: str) -> subprocess.Popen:
    """``webhook-ledger ARGS --json`` started in its own process."""
    argv = [sys.executable, "-m", "ledgerctl.cli", *args, "--json"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def answer(proc: subprocess.Popen) -> tuple[int, dict]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, json.loads(out) if out.strip() else {"stderr": err.decode()}


def states(redis: Redis, payments: list[str]) -> set[str]:
    return {state_of(redis, pk) for pk in payments}


def test_ten_failed_payments_requeued_once_by_two_concurrent_bulk_retries(
    stack, redis, config, rng
) -> None:
    env = service_env(str(config["REDIS_URL"]), {k: str(v) for k, v in config.items()})
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url)
        s.start_service(workers=2)
        events = [paid_event(rng) for _ in range(12)]
        failing = [payment_key_of(e) for e, _ in events[:10]]
        downstream.refusing.update(failing)  # a 400 for these ten: a bug, fixed below
        for _, body in events:
            assert s.send(body).status_code == 200
        wait_until(lambda: states(redis, failing) == {"failed"}, timeout=60)

        code, dry = answer(
            cli(env, "retry", "--state", "failed", "--error", "HTTP 400", "--dry-run")
        )
        assert code == 0 and dry["matched"] == 10 and dry["requeued"] == 0
        assert sorted(dry["payment_keys"]) == sorted(failing)
        code, none = answer(cli(env, "retry", "--state", "failed", "--error", "timeout"))
        assert code == 1 and none["matched"] == 0
        assert states(redis, failing) == {"failed"}  # nothing changed

        downstream.refusing.clear()
        runs = [cli(env, "retry", "--state", "failed", "--since", "1h") for _ in range(2)]
        answers = [answer(run) for run in runs]
        assert sum(done["requeued"] for _, done in answers) == 10
        wait_until(lambda: states(redis, failing) == {"fulfilled"}, timeout=60)
        assert {pk: downstream.successes[pk] for pk in failing} == {pk: 1 for pk in failing}
        assert stats(redis)["requeued:operator"] == 10
        assert redis.zcard(keys.state_index("failed")) == 0
