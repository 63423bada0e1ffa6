"""A downstream call blocked inside C code past its hard deadline: SQLite waiting for a lock
another process holds. SIGALRM cannot interrupt that wait, so the deadline is enforced on the
process: its watchdog ends it before its lease can expire. A person's retry is refused while
that process may still be in the call and taken once it is gone; the lock is released by the
test, not by time."""

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from redis import Redis

from ledger import keys
from ledgerctl import samples
from tests.support.helpers import cli_ok, payment_key_of, run_cli, settled_as, state_of
from tests.support.processes import RqWorker, wait_until

HOLD_THE_LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()  # until the test says so
db.execute("COMMIT")
"""


@contextmanager
def holding_the_lock(path: Path) -> Iterator[subprocess.Popen]:
    """A process holding ``path``'s write lock until it is sent a line (``communicate``);
    killed at the end if it still runs."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        yield holder
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def shop(tmp_path: Path) -> Path:
    path = tmp_path / "shop.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE orders (payment_key TEXT PRIMARY KEY, token INTEGER)")
    db.commit()
    db.close()
    return path


def orders(path: Path) -> list[tuple[str, int]]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT payment_key, token FROM orders").fetchall()
    finally:
        db.close()


def in_call(redis: Redis, pk: str) -> bool:
    return redis.hget(keys.payment(pk), "phase") == b"calling"


def ended(workers: list[RqWorker]) -> list[RqWorker]:
    return [w for w in workers if w.proc and w.proc.poll() is not None]


def attempt(redis: Redis, pk: str, token: int) -> dict:
    raw = redis.hget(keys.payment(pk), f"attempt:{token}")
    return json.loads(raw) if raw else {}


@pytest.mark.parametrize("replay_safe", [False, True], ids=["not-replay-safe", "replay-safe"])
def test_a_call_stuck_in_c_code_ends_with_its_process_before_its_lease(
    replay_safe: bool, stack, redis: Redis, config, rng, tmp_path: Path
) -> None:
    path = shop(tmp_path)
    with holding_the_lock(path) as holder:
        s = stack(
            FULFILMENT_ACTION="tests.support.broken_actions:insert_order",
            FULFILMENT_REPLAY_SAFE=str(replay_safe).lower(),
            FULFILMENT_TIMEOUT="2",
            LEASE_SECONDS="4",
            SHOP_DB=str(path),
        )
        env = s.env
        s.start_web()
        event = samples.payment_events(rng)[2]
        pk = payment_key_of(event)
        assert s.send(samples.encode(event)).status_code == 200
        workers = [s.start_worker(), s.start_worker()]

        wait_until(lambda: in_call(redis, pk), what="attempt 1 in its call")
        # Read before the CLI runs: the caller's key goes with the lease, which nothing
        # renews once the watchdog has ended the process.
        caller = attempt(redis, pk, 1).get("caller", "")
        alive = redis.get(keys.caller(caller)) or b""
        assert alive.startswith(f"{pk} 1 ".encode()), (caller, alive)
        refused = run_cli(env, "resolve", pk, "--retry")
        assert cli_ok(refused, 1) and "in_progress" in refused.output

        # SIGALRM fired at 2 s but cannot reach the waiting call; the watchdog ends the process.
        wait_until(lambda: ended(workers), what="the stuck worker ended")
        (stuck,) = ended(workers)
        assert stuck.proc is not None and stuck.proc.returncode == 1
        assert f":{stuck.proc.pid}:" in caller
        assert "Timeout" in (tmp_path / "worker.log").read_text(errors="replace")
        s.start_sweeper()
        if replay_safe:
            # Re-run only once the first call has provably stopped: its process is gone.
            holder.communicate(b"go\n", timeout=10)
            wait_until(lambda: settled_as(redis, pk, "fulfilled"), what=f"{pk} fulfilled")
        else:
            wait_until(lambda: state_of(redis, pk) == "interrupted", what=f"{pk} interrupted")
            assert redis.get(keys.caller(caller)) is None  # gone with its process
            holder.communicate(b"go\n", timeout=10)
            accepted = run_cli(env, "resolve", pk, "--retry")
            assert cli_ok(accepted) and "queued" in accepted.output, accepted.output
            wait_until(lambda: settled_as(redis, pk, "fulfilled"), what=f"{pk} fulfilled")
        assert attempt(redis, pk, 1)["outcome"] == "lease_expired"
        assert orders(path) == [(pk, int(redis.hget(keys.payment(pk), "token") or 0))]
        survivor = next(w for w in workers if w is not stuck)
        assert isinstance(survivor, RqWorker) and survivor.proc and survivor.proc.poll() is None


def test_the_built_in_sqlite_action_gives_up_a_lock_within_its_deadline(
    stack, redis: Redis, rng, tmp_path: Path
) -> None:
    """The built-in SQLite action waits for another writer's lock for a share of
    FULFILMENT_TIMEOUT, not its own 10 s: that wait is C code, so past the deadline only the
    watchdog could end it, with the whole worker process. It ends as a retry (the file
    locked, nothing applied) and the payment is fulfilled once the lock is gone."""
    path = tmp_path / "orders.sqlite3"
    s = stack(FULFILMENT_ACTION=f"sqlite:///{path}", FULFILMENT_TIMEOUT="2", LEASE_SECONDS="4")
    s.start_web()
    worker = s.start_worker()  # makes the file (its start-up check) before the lock is taken
    wait_until(path.exists, what="the downstream file")
    with holding_the_lock(path) as holder:
        event = samples.payment_events(rng)[2]
        pk = payment_key_of(event)
        assert s.send(samples.encode(event)).status_code == 200
        wait_until(lambda: "ended" in attempt(redis, pk, 1), what="attempt 1 ended")
        first = attempt(redis, pk, 1)
        assert first["outcome"] == "retry" and "locked" in first["detail"], first
        assert worker.proc is not None and worker.proc.poll() is None, "the worker was ended"
        holder.communicate(b"go\n", timeout=10)
        s.start_sweeper()
        wait_until(lambda: settled_as(redis, pk, "fulfilled"), what=f"{pk} fulfilled")
        db = sqlite3.connect(path)
        try:
            assert db.execute("SELECT payment_key FROM orders").fetchall() == [(pk,)]
        finally:
            db.close()
