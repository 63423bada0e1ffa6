"""Replicas lost under a live service: with one of two replicas gone intake goes on; with
both gone a delivery gets 503, never an acknowledgement held by the primary alone; when a
replica is back, the deliveries sent again are acknowledged and every payment fulfils once.

Two things refuse the single-copy write: LEDGER_MIN_REPLICAS=1 (WAIT finds no replica) and
the shipped config/replication.conf (min-replicas-to-write 1: the primary refuses writes
once it has noticed its replicas are gone; a killed replica's connection closes at once).
Each is shown alone; with neither, the primary acknowledges on its own copy.
"""

import random
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.constants import SECRET
from tests.support.ha import Cluster
from tests.support.ha_service import after_storm, start_service
from tests.support.storm import Storm, deliveries, payments

pytestmark = pytest.mark.timeout(300)
SHIPPED, OFF = "1", "0"
"""min-replicas-to-write as shipped, and turned off."""


@pytest.mark.parametrize(
    ("min_replicas", "refuse_writes", "refused"),
    [(1, SHIPPED, True), (1, OFF, True), (0, SHIPPED, True), (0, OFF, False)],
    ids=["wait+refuse", "wait", "refuse", "neither"],
)
def test_replicas_lost_then_back(
    cluster: Cluster,
    exits: ExitStack,
    tmp_path: Path,
    min_replicas: int,
    refuse_writes: str,
    refused: bool,
) -> None:
    rng = random.Random(20261218 + min_replicas)
    cluster.configure("min-replicas-to-write", refuse_writes)
    service, _ = start_service(cluster, tmp_path, exits, min_replicas, replay_safe=True)
    primary = cluster.primary()
    first, second = [p for p in cluster.topology.node_ports if p != primary]
    batches = [payments(rng, 6) for _ in range(3)]

    cluster.kill(first)
    cluster.wait_online(primary, replicas=1)
    one_left = Storm(service.web.url, deliveries(rng, batches[0]), SECRET, give_up=60).start()
    one_left.join()
    assert set(one_left.statuses) == {200}, one_left.statuses

    cluster.kill(second)
    cluster.wait_online(primary, replicas=0)
    none_left = Storm(service.web.url, deliveries(rng, batches[1]), SECRET, give_up=600).start()
    if refused:
        none_left.wait_answers(2 * len(none_left.events))  # every one refused, sent again
        assert set(none_left.statuses) == {503}, none_left.statuses
    else:  # what neither promises: acknowledged with the primary's copy alone
        none_left.join()
        assert set(none_left.statuses) == {200}, none_left.statuses

    cluster.start_node(first)
    cluster.wait_replica_of(first, primary)
    none_left.join()
    back = Storm(service.web.url, deliveries(rng, batches[2]), SECRET, give_up=60).start()
    back.join()
    assert set(back.statuses) == {200}, back.statuses

    for storm, paid in ((one_left, batches[0]), (none_left, batches[1]), (back, batches[2])):
        outcome = after_storm(service, paid, storm)
        assert outcome.found.lost == [] and outcome.found.duplicated == [], outcome.summary()
        assert outcome.states == {"fulfilled": len(paid)}, outcome.states
    log = (tmp_path / "web.log").read_text()
    print(f"503 NOREPLICAS {log.count('NOREPLICAS')}, unconfirmed {log.count('replicas within')}")
