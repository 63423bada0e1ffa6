"""Every outcome the ledger can record is one the metrics export: an outcome missing from
ATTEMPT_OUTCOMES would be counted in Redis and never reach Prometheus."""

import re
from pathlib import Path

from ledger.health import ATTEMPT_OUTCOMES

PRELUDE = Path(__file__).resolve().parents[2] / "ledger" / "lua" / "prelude.lua"


def test_metrics_export_every_outcome_finish_attempt_accepts() -> None:
    source = PRELUDE.read_text()
    table = re.search(r"local FINISHED = \{(.*?)\}", source, re.S)
    assert table is not None, "FINISHED is no longer a table in prelude.lua"
    accepted = set(re.findall(r"(\w+) = true", table.group(1)))
    assert accepted == set(ATTEMPT_OUTCOMES)
