"""What LEDGER_MIN_REPLICAS=0 does and does not promise on a replicated ledger.

Promised: every process finds the new primary after a failover, intake and fulfilment go
on, a write the primary refuses is answered 503. Not promised: a delivery acknowledged, or
a fencing token handed out, by a primary in the moments before it died or was cut off and
replaced, before replication carried it on, is gone after the failover. The shipped
min-replicas-to-write narrows that window to min-replicas-max-lag; LEDGER_MIN_REPLICAS=1
closes it (tests/system/test_failover.py).
"""

import random
from contextlib import ExitStack
from pathlib import Path

import pytest

from ledger import keys
from ledger.deliveries import LedgerUnavailable, Recorded
from tests.support.ha import Cluster
from tests.support.ha_service import Probe, start_service, storm_through
from tests.support.storm import Storm, deliveries, payments

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize(("min_replicas", "acknowledged"), [(1, False), (0, True)])
def test_a_write_waiting_on_a_replaced_primary(
    cluster: Cluster, min_replicas: int, acknowledged: bool
) -> None:
    """min-replicas-to-write off, so LEDGER_MIN_REPLICAS alone decides: a primary frozen
    (SIGSTOP) and replaced resumes and runs the delivery that waited on it. With 1 it is
    answered 503 (no replica confirms it); with 0 it is acknowledged. Either way the write is
    gone once the old primary rejoins as a replica: with 0 an acknowledged delivery is lost."""
    cluster.configure("min-replicas-to-write", "0")
    old = cluster.primary()
    probe = Probe(old, min_replicas, random.Random(20261219))
    cluster.pause(old)
    new = cluster.wait_failover(old)
    probe.send()
    cluster.resume(old)
    answer = probe.result()
    cluster.wait_replica_of(old, new)
    with cluster.client(new) as ledger:
        assert not ledger.exists(keys.event(probe.event["id"])), "undone on rejoining"
    print(f"\nanswer: {answer!r}")
    if acknowledged:
        assert isinstance(answer, Recorded), answer
    else:
        assert isinstance(answer, LedgerUnavailable) and "replicas within" in str(answer)


def test_primary_killed_mid_storm_without_waiting(
    cluster: Cluster, exits: ExitStack, tmp_path: Path
) -> None:
    """test_failover's storm and kill -9 with LEDGER_MIN_REPLICAS=0 and a downstream that
    never dedupes: the service finds the new primary and acknowledges every delivery in the
    end, and every payment settles. Lost acknowledgements and double calls are possible
    (replication is asynchronous), so they are printed, not asserted."""
    rng = random.Random(20261220)
    paid = payments(rng, 90)
    sent = deliveries(rng, paid)
    service, downstream = start_service(cluster, tmp_path, exits, 0, replay_safe=False)
    old = cluster.primary()

    def kill(storm: Storm) -> None:
        storm.wait_answers(len(sent) // 3)
        cluster.kill(old)
        cluster.wait_failover(old)

    outcome = storm_through(service, paid, sent, kill, downstream)
    assert outcome.statuses[503] > 0, "the failover was seen by the senders"
    assert set(outcome.states) <= {"fulfilled", "interrupted"}, outcome.states
