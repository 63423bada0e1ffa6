"""redis-py's readiness check in the gevent web worker (webhook/redis_readiness.py): a
zero-timeout check is the operating system's poll, never a trip through gevent's hub; one
with a timeout still waits cooperatively; and the pool still refuses a connection holding
an unread reply or closed by Redis."""

import subprocess
import sys

from tests.support.processes import ROOT, RedisServer

IN_GEVENT = """
from gevent import monkey

monkey.patch_all()
import sys

import gevent

from ledger import connection, settings
from tests.integration.test_redis_pool import closed_connection_is_replaced, unread_reply_is_dropped
from webhook.redis_readiness import poll_without_the_hub


def others_ran_during(check):
    ran = []
    gevent.spawn(ran.append, 1)
    check()
    return bool(ran)


client = connection.connect(settings.load({}, REDIS_URL=sys.argv[1], REDIS_MAX_CONNECTIONS=1))
pooled = client.connection_pool.get_connection()
before = others_ran_during(pooled.can_read)
assert poll_without_the_hub()
after = others_ran_during(pooled.can_read)
waited = others_ran_during(lambda: pooled.can_read(timeout=0.05))
client.connection_pool.release(pooled)
assert client.ping()
unread_reply_is_dropped(sys.argv[1])
closed_connection_is_replaced(sys.argv[1])
print(before, after, waited)
"""

PLAIN = """
import select

from redis._parsers import hiredis

from webhook.redis_readiness import poll_without_the_hub

print(poll_without_the_hub(), hiredis.select is select)
"""


def run(code: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_zero_timeout_check_no_longer_goes_through_the_hub(redis_server: RedisServer) -> None:
    """gevent's own poll let another greenlet run inside the check (a switch to the hub);
    the OS's does not. A check with a timeout still lets them run while it waits."""
    assert run(IN_GEVENT, redis_server.url) == "True False True"


def test_a_process_gevent_did_not_patch_keeps_redis_py_as_it_is() -> None:
    assert run(PLAIN) == "False True"
