"""The PostgreSQL action in a worker slot's thread (FULFILMENT_CONCURRENCY > 1) with the
server frozen mid-call (SIGSTOP of the postmaster and every backend: a stalled VM). libpq
waits in C, which no signal reaches in a helper thread, and a frozen server enforces no
statement_timeout: the watchdog ended the worker process, and every call in flight with it.
At the deadline the action's ``abort`` shuts the connection's socket down: the call ends as
a retry (ambiguous, replay-safe) and the process lives on to call again once it thaws."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.postgres import PostgresServer, make_shop, orders_per_payment
from tests.support.processes import ROOT, children

SLOT = """
import sys, threading

from ledger import settings
from ledger.purchase import purchase_of
from workers.actions import build_action
from workers.jobs import run_action

s = settings.load()
action = build_action(s)


def call(n):
    fields = {"amount": "100", "currency": "usd", "livemode": "0", "events": "[]"}
    outcome, detail, *_ = run_action(
        action, purchase_of(f"pi_{n}", 1, fields), s.FULFILMENT_TIMEOUT,
        s.FULFILMENT_KILL_MARGIN_SECONDS,
    )
    print(n, outcome, detail[:60], flush=True)


def slot():
    call("warm")
    if sys.argv[1] == "between":  # frozen while the pool holds the connection idle
        print("idle", flush=True)
        sys.stdin.readline()
    print("calling", flush=True)
    call("frozen")  # mid: the test freezes the server while it runs
    sys.stdin.readline()  # until the test has thawed it
    call("thawed")


thread = threading.Thread(target=slot, name="fulfil_1")
thread.start()
thread.join()
"""


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.remove()


@pytest.mark.parametrize("when", ["mid", "between"])
def test_a_call_to_a_frozen_database_ends_at_its_deadline_not_with_the_worker(
    own_postgres: PostgresServer, tmp_path: Path, when: str
) -> None:
    """Frozen mid-statement, or while the pool held the connection idle (the pool's own
    check of it, before the call's transaction, meets the frozen server)."""
    url = make_shop(own_postgres.database("frozen"))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "REDIS_URL": "redis://127.0.0.1:1/0",  # not used: the action alone
        "STRIPE_WEBHOOK_SECRET": "whsec_test_frozen",
        "FULFILMENT_ACTION": url,
        "FULFILMENT_TIMEOUT": "5",  # the warm and thawed calls sleep 1 s of it
        "FULFILMENT_SQL": "INSERT INTO shop_orders (payment_key, amount, currency)"
        " SELECT %(payment_key)s, %(amount)s, %(currency)s FROM pg_sleep(1) RETURNING id",
    }
    with (
        (tmp_path / "worker.err").open("w") as err,
        subprocess.Popen(
            [sys.executable, "-c", SLOT, when],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        ) as worker,
    ):
        assert worker.stdout is not None and worker.stdin is not None
        try:
            assert worker.stdout.readline().split()[:2] == ["warm", "fulfilled"]
            if when == "between":
                assert worker.stdout.readline().strip() == "idle"
            else:
                assert worker.stdout.readline().strip() == "calling"
            server = [own_postgres.pid, *children(own_postgres.pid)]  # its backend too
            for pid in server:  # mid: the call is in its pg_sleep(1), or about to send it
                os.kill(pid, signal.SIGSTOP)
            try:
                if when == "between":  # the pool's check of the connection meets it
                    worker.stdin.write("call\n")
                    worker.stdin.flush()
                    assert worker.stdout.readline().strip() == "calling"
                frozen = worker.stdout.readline().split()
            finally:
                for pid in server:
                    os.kill(pid, signal.SIGCONT)
            assert frozen[:3] == ["frozen", "retry", "deadline:"], frozen
            worker.stdin.write("go\n")
            worker.stdin.flush()
            assert worker.stdout.readline().split()[:2] == ["thawed", "fulfilled"]
            assert worker.wait(30) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
    assert orders_per_payment(url).get("pi_warm") == 1 and orders_per_payment(url)["pi_thawed"] == 1
