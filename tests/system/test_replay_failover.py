"""The README's failover demo, as a user runs it: ``scripts/replay_events.py --scenario storm
--seed 8 --expect-once`` against the service on a replicated ledger (LEDGER_MIN_REPLICAS=1,
everything found through Sentinel) while the primary is killed. The storm scenario sends a
delivery again on Stripe's schedule, compressed, while it is not answered 2xx: the 503s of
the failover are sent again, nothing acknowledged is lost and the script exits 0.

The kill is ordered by progress (deliveries the ledger has counted), never by time.
"""

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from ledger import keys
from tests.support.constants import SECRET
from tests.support.ha import Cluster
from tests.support.ha_service import Service
from tests.support.processes import ROOT, stop, wait_until

pytestmark = pytest.mark.timeout(420)

SCRIPT = str(ROOT / "scripts" / "replay_events.py")
STORM_DELIVERIES = 2400
"""The storm scenario's valid deliveries: 200 payments x 4 events x 3 copies."""


def test_storm_with_retries_through_a_primary_kill(
    cluster: Cluster, exits: ExitStack, tmp_path: Path
) -> None:
    service = Service(cluster, tmp_path, exits, LEDGER_MIN_REPLICAS="1")
    old = cluster.primary()
    report = tmp_path / "replay.json"
    argv = [sys.executable, SCRIPT, "--url", f"{service.web.url}/webhooks/stripe"]
    argv += ["--secret", SECRET, "--scenario", "storm", "--seed", "8", "--expect-once"]
    argv += ["--settle-timeout", "240", "--json", str(report), "--quiet"]
    with (tmp_path / "replay.err").open("w") as err:
        replay = subprocess.Popen(argv, env=service.env, stdout=err, stderr=err)
    exits.callback(stop, replay)

    def counted() -> int:
        return int(service.ledger().hget(keys.STATS, "deliveries") or 0)

    wait_until(
        lambda: counted() >= STORM_DELIVERIES // 4 or replay.poll() is not None,
        180,
        0.05,
        "a quarter of the storm recorded",
    )
    assert replay.poll() is None, "the storm ended before the primary was killed"
    cluster.kill(old)
    assert cluster.wait_failover(old) != old
    status = replay.wait(360)
    stderr = (tmp_path / "replay.err").read_text()
    result = json.loads(report.read_text())
    print(f"\nanswered {result['layers']['answered']}; sent {result['layers']['sent']}")
    assert status == 0, stderr
    findings = result["findings"]
    assert findings["passed"] and findings["lost"] == [] and findings["duplicated"] == []
    assert findings["unacknowledged"] == 0
    assert result["layers"]["sent"]["valid"] == STORM_DELIVERIES
    refused = sum(n for code, n in result["layers"]["answered"].items() if code != "200")
    assert refused > 15, "the failover was seen: more than the 15 forged probes not answered 2xx"
    assert result["layers"]["sent"]["retries"] > 0, "and what it refused was sent again"
    assert result["layers"]["payments"] == {"fulfilled": 200}
