"""The shared gate through a failover (real redis-server and redis-sentinel processes): with
LEDGER_MIN_REPLICAS a pause or resume is acknowledged only once replicas have it, like a
person's decision on a payment, and the breaker's writes ride on the attempt's own
replicated finish."""

import random

import pytest
from redis import Redis

from ledger import keys
from ledger.attempts import Attempts
from ledger.deliveries import Ledger
from ledger.gate import Gate, Health
from ledger.replication import NotReplicated
from ledger.settings import Settings
from tests.support.ha import Cluster
from tests.support.helpers import delivery, paid_event, payment_key_of
from tests.system.test_replication import freeze_replicas, load

pytestmark = pytest.mark.timeout(180)


def test_an_acknowledged_pause_is_still_paused_on_the_promoted_replica(cluster: Cluster) -> None:
    """Regression: a pause was written without WAIT. With the replicas cut off it was
    acknowledged ("paused") though no replica had it, and the failover after the primary's
    death undid it. Now it is refused as not confirmed (and the failover undoes it, as the
    person was told it could); a pause acknowledged, then the primary killed and a replica
    promoted: still paused, and so is the breaker a finished attempt opened before it."""
    cluster.configure("min-replicas-to-write", "0")
    # A short WAIT where no replica can answer; a longer one (under REDIS_SOCKET_TIMEOUT) where
    # one must: a loaded machine's replica may take more than 0.3 s to acknowledge.
    unconfirmed = load(cluster, LEDGER_MIN_REPLICAS=1, LEDGER_WAIT_TIMEOUT=0.3)
    s = load(cluster, LEDGER_MIN_REPLICAS=1, LEDGER_WAIT_TIMEOUT=1.5, BREAKER_THRESHOLD=1)
    first = cluster.primary()
    gate = Gate(Redis(port=first), unconfirmed)
    replicas = freeze_replicas(cluster, first, gate.redis)
    cluster.wait_online(first, replicas=0)
    with pytest.raises(NotReplicated, match="the pause is written on the primary, confirmed by 0"):
        gate.pause("ops:alice", "not confirmed")
    cluster.kill(first)
    for port in replicas:
        cluster.resume(port)
    second = cluster.wait_failover(first)
    cluster.wait_online(second, replicas=1)
    with cluster.client(second) as primary:
        assert not primary.exists(keys.PAUSE), "the unconfirmed pause is gone, as it was told"
        breaker_opened_by_an_attempt(primary, s)
        assert Gate(primary, s).pause("ops:alice", "confirmed")  # acknowledged: a replica has it
    cluster.kill(second)
    third = cluster.wait_failover(second)
    with cluster.client(third) as promoted:
        paused = promoted.hgetall(keys.PAUSE)
        assert paused[b"reason"] == b"confirmed" and paused[b"by"] == b"ops:alice", paused
        assert b"since" in paused
        assert promoted.hget(keys.BREAKER, "state") == b"open"


def breaker_opened_by_an_attempt(redis: Redis, s: Settings) -> None:
    """A job's path (workers/jobs.py): its refused connection reported to the breaker (a
    witness beyond one payment's own answer, so threshold 1 opens it), then its attempt
    finished; the finish waits for LEDGER_MIN_REPLICAS, which covers the breaker's write
    before it (replication is one ordered stream)."""
    attempts, gate = Attempts(redis, s), Gate(redis, s)
    event, body = paid_event(random.Random(7))
    pk = payment_key_of(event)
    Ledger(redis, s).record_delivery(delivery(event, body))
    start = attempts.start(pk, "job-1", replay_safe=False)
    assert attempts.mark_calling(pk, start.token)
    refused = "http: ConnectionError (Connection refused)"
    assert gate.report(pk, start.token, Health("down", sent=False), refused) == "open"
    assert attempts.finish(pk, start.token, "retry", refused, 1.0) == ("retry", "retrying")
