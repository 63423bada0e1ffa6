"""The ledger's Redis pool refuses to hand out a connection holding a reply nobody read
(ledger/connection.py, ``maint_notifications_config``): it reconnects it first, in a plain
process and in one gevent has patched (the web process). With redis-py's default the next
command read that reply as its own."""

import subprocess
import sys

from ledger import connection, settings
from tests.support.processes import ROOT, RedisServer, wait_until

IN_GEVENT = """
from gevent import monkey

monkey.patch_all()
import select
import sys

from tests.integration.test_redis_pool import unread_reply_is_dropped

assert select.poll is not monkey.get_original("select", "poll"), "gevent did not patch"
unread_reply_is_dropped(sys.argv[1])
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


def test_a_connection_left_with_an_unread_reply_is_reconnected_before_reuse(
    redis_server: RedisServer,
) -> None:
    unread_reply_is_dropped(redis_server.url)


def test_so_it_is_in_a_process_gevent_patched(redis_server: RedisServer) -> None:
    done = subprocess.run(
        [sys.executable, "-c", IN_GEVENT, redis_server.url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
