"""The service on a replicated ledger (one primary, two replicas, three Sentinels, all real
processes on loopback) through a failover, with LEDGER_MIN_REPLICAS=1: nothing acknowledged
is lost, no payment is fulfilled twice, every process finds the new primary by itself.

Faults are ordered by progress (answers seen, what Sentinel and ``INFO replication``
report), never by sleeps. LEDGER_MIN_REPLICAS=0: tests/system/test_failover_without_waiting.py.
"""

import random
from contextlib import ExitStack
from pathlib import Path

import pytest

from ledger import keys
from ledger.deliveries import LedgerUnavailable
from tests.support.ha import Cluster
from tests.support.ha_service import Probe, start_service, storm_through
from tests.support.storm import Storm, deliveries, payments

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("replay_safe", [True, False], ids=["replay_safe", "not_replay_safe"])
def test_primary_killed_mid_storm(
    cluster: Cluster, exits: ExitStack, tmp_path: Path, replay_safe: bool
) -> None:
    """kill -9 of the primary a third of the way into a storm; Sentinel promotes a replica;
    the storm goes on (503s while it switches, sent again like Stripe does)."""
    rng = random.Random(20261216)
    paid = payments(rng, 90)
    sent = deliveries(rng, paid)
    service, downstream = start_service(cluster, tmp_path, exits, 1, replay_safe)
    old = cluster.primary()

    def kill(storm: Storm) -> None:
        storm.wait_answers(len(sent) // 3)
        cluster.kill(old)
        assert cluster.wait_failover(old) != old

    outcome = storm_through(service, paid, sent, kill, downstream)
    assert outcome.found.lost == [], outcome.found.lost
    assert outcome.found.duplicated == [], outcome.found.duplicated
    assert outcome.found.unfulfilled == [], outcome.found.unfulfilled
    assert outcome.statuses[503] > 0, "the failover was seen by the senders"
    if replay_safe:  # exactly one effect each, and the ledger counted one fulfilment each
        assert outcome.states == {"fulfilled": len(paid)}, outcome.states
        assert int(service.ledger().hget(keys.STATS, "effects") or 0) == len(paid)
    else:  # at most one call each; a call cut by the failover waits for a person
        assert max(outcome.calls.values()) == 1, outcome.calls.most_common(3)
        assert set(outcome.states) <= {"fulfilled", "interrupted"}, outcome.states


def test_partitioned_primary_acknowledges_nothing_after_it_was_replaced(
    cluster: Cluster,
    exits: ExitStack,
    tmp_path: Path,
) -> None:
    """SIGSTOP of the primary until Sentinel has promoted a replica and the storm is
    acknowledged by it, then SIGCONT: what the old primary still takes from the requests
    waiting on it is never acknowledged (no replica confirms it), and after it rejoins as a
    replica every acknowledged delivery is in the ledger."""
    rng = random.Random(20261217)
    paid = payments(rng, 90)
    sent = deliveries(rng, paid)
    service, downstream = start_service(cluster, tmp_path, exits, 1, replay_safe=False)
    old = cluster.primary()

    probe = Probe(old, 1, rng)

    def partition(storm: Storm) -> None:
        storm.wait_answers(len(sent) // 3)
        cluster.pause(old)
        new = cluster.wait_failover(old)
        probe.send()
        acked_before = storm.statuses[200]
        storm.wait_for(lambda answers: sum(a.status == 200 for a in answers) > acked_before + 20)
        cluster.resume(old)
        cluster.wait_replica_of(old, new)

    outcome = storm_through(service, paid, sent, partition, downstream)
    answer = probe.result()
    print(f"the old primary's answer to a request waiting on it: {answer!r}")
    assert isinstance(answer, LedgerUnavailable), answer
    assert not service.ledger().exists(keys.event(probe.event["id"])), "its write was undone"
    assert outcome.found.lost == [], outcome.found.lost
    assert outcome.found.duplicated == [], outcome.found.duplicated
    assert outcome.found.unfulfilled == [], outcome.found.unfulfilled
    assert max(outcome.calls.values()) == 1, outcome.calls.most_common(3)
    assert set(outcome.states) <= {"fulfilled", "interrupted"}, outcome.states
    unconfirmed = (tmp_path / "web.log").read_text().count("replicas within")
    print(f"503 for want of a replica's confirmation: {unconfirmed}")
