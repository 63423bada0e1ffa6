"""The ledger's Redis pool refuses to hand out a connection holding a reply nobody read
(ledger/connection.py, ``maint_notifications_config``): it reconnects it first, in a plain
process and in one gevent has patched (the web process). With redis-py's default the next
command read that reply as its own. A connection Redis closed is replaced the same way. And
with Redis frozen a command gives up after
REDIS_RETRIES + 1 tries, not the square of that (``OutermostRetry``)."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from redis.exceptions import ConnectionError, TimeoutError

from ledger import connection, settings
from tests.support.processes import ROOT, RedisServer, wait_until

IN_GEVENT_FROZEN = """
from gevent import monkey

monkey.patch_all()
import sys

from tests.integration.test_redis_pool import tries_while_frozen

print(tries_while_frozen(sys.argv[1], int(sys.argv[2]), callers=3, retries=2))
"""

IN_GEVENT = """
from gevent import monkey

monkey.patch_all()
import select
import sys

from tests.integration.test_redis_pool import closed_connection_is_replaced, unread_reply_is_dropped

assert select.poll is not monkey.get_original("select", "poll"), "gevent did not patch"
unread_reply_is_dropped(sys.argv[1])
closed_connection_is_replaced(sys.argv[1])
"""


def unread_reply_is_dropped(url: str) -> None:
    """A pooled connection with an unread PONG is not given to the next command."""
    client = connection.connect(settings.load({}, REDIS_URL=url, REDIS_MAX_CONNECTIONS=1))
    try:
        client.set("pool:key", "value")
        pooled = client.connection_pool.get_connection()
        pooled.send_command("PING")  # its reply is never read
        wait_until(lambda: pooled.can_read(timeout=0.1), what="the PONG")
        client.connection_pool.release(pooled)
        assert client.get("pool:key") == b"value", "given a connection with a PONG in it"
    finally:
        connection.close(client)


def closed(pooled: Any) -> bool:
    try:
        return bool(pooled.can_read(timeout=0.1))
    except ConnectionError:
        return True


def closed_connection_is_replaced(url: str) -> None:
    """A pooled connection Redis closed (CLIENT KILL, a restart, a timeout) is replaced
    before the next command, which neither fails nor spends a retry."""
    given = {"REDIS_URL": url, "REDIS_MAX_CONNECTIONS": 1, "REDIS_RETRIES": 0}
    client = connection.connect(settings.load({}, **given))
    observer = connection.connect(settings.load({}, REDIS_URL=url))
    try:
        client.set("pool:key", "value")
        pooled = client.connection_pool.get_connection()
        pooled.send_command("CLIENT", "ID")
        pooled_id = pooled.read_response()
        client.connection_pool.release(pooled)
        assert observer.client_kill_filter(_id=pooled_id) == 1
        wait_until(lambda: closed(pooled), what="the close to reach the client")
        assert client.get("pool:key") == b"value"
    finally:
        connection.close(client)
        connection.close(observer)


def test_a_connection_left_with_an_unread_reply_is_reconnected_before_reuse(
    redis_server: RedisServer,
) -> None:
    unread_reply_is_dropped(redis_server.url)


def test_a_connection_redis_closed_is_replaced_before_reuse(redis_server: RedisServer) -> None:
    closed_connection_is_replaced(redis_server.url)


def test_so_they_are_in_a_process_gevent_patched(redis_server: RedisServer) -> None:
    done = subprocess.run(
        [sys.executable, "-c", IN_GEVENT, redis_server.url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def tries_while_frozen(url: str, pid: int, callers: int, retries: int) -> int:
    """Connections ``callers`` concurrent commands open while Redis is stopped (SIGSTOP: the
    kernel still accepts them), counted by Redis once it runs again; each command must fail
    as unavailable."""
    given = {"REDIS_URL": url, "REDIS_SOCKET_TIMEOUT": 0.3, "REDIS_RETRIES": retries}
    client = connection.connect(settings.load({}, **given))
    observer = connection.connect(settings.load({}, REDIS_URL=url))
    errors: list[BaseException | None] = []

    def command() -> None:
        try:
            client.get("frozen:key")
            errors.append(None)
        except (ConnectionError, TimeoutError) as exc:
            errors.append(exc)

    def received() -> int:
        return int(observer.info("stats")["total_connections_received"])

    try:
        client.ping()  # one pooled connection, the others new
        before = received()
        os.kill(pid, signal.SIGSTOP)
        try:
            threads = [threading.Thread(target=command) for _ in range(callers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert len(errors) == callers and all(errors), errors
        # Redis accepts the queued connections once it runs again: wait until it has.
        counts: list[int] = []
        wait_until(lambda: counts.append(received()) or counts[-2:] == [counts[-1]] * 2)
        return counts[-1] - before - 1  # less the observer's own reconnect, if any
    finally:
        connection.close(client)
        connection.close(observer)


def test_a_frozen_redis_costs_a_command_its_retries_plus_one_tries_not_their_square(
    tmp_path: Path,
) -> None:
    """redis-py retries the command and, inside each try, the health check of the new
    connection with the same policy: 3 callers at REDIS_RETRIES=2 opened 19 connections
    and each waited up to 9 socket timeouts (34 s at the defaults, past Stripe's wait).
    Now at most 3 each: one try per connection, the retries the command's own."""
    server = RedisServer(tmp_path / "redis").start()
    try:
        opened = tries_while_frozen(server.url, server.pid, callers=3, retries=2)
    finally:
        server.stop()
    assert 3 <= opened <= 3 * (2 + 1), opened


def test_so_it_is_with_gevent_patched(tmp_path: Path) -> None:
    """Which call is the outermost is kept per greenlet (a context variable)."""
    server = RedisServer(tmp_path / "redis").start()
    try:
        done = subprocess.run(
            [sys.executable, "-c", IN_GEVENT_FROZEN, server.url, str(server.pid)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert 3 <= int(done.stdout.split()[-1]) <= 3 * (2 + 1), done.stdout
