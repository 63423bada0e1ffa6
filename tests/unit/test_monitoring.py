"""The shipped monitoring files, read as a user's Prometheus and Grafana would: every alert
has a severity, numbers in its text and a runbook section; the dashboard imports as is
(its own datasource variable, unique panel ids, panels inside the grid and not overlapping).
promtool checks and unit-tests the rules (scripts/check_alerts.sh); whether every metric
they use is exported is tests/system/test_prometheus.py."""

import json
import re
from typing import Any

import yaml

from tests.support.processes import ROOT
from tests.support.prometheus import DASHBOARD, RULES

RUNBOOK = ROOT / "docs" / "RUNBOOK.md"
ASKED_FOR = {
    "WebhookPaymentsNeedAPerson",
    "WebhookFulfilmentStalled",
    "WebhookSignatureFailures",
    "WebhookLedgerUnavailable",
    "WebhookWorkersDown",
    "WebhookReconcileMissing",
    "WebhookDownstreamUnavailable",
    "WebhookLedgerReplicasLow",
}


def alerting_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_every_alert_has_a_severity_its_numbers_and_a_runbook_section() -> None:
    rules = alerting_rules()
    assert ASKED_FOR <= {r["alert"] for r in rules}
    sections = set(re.findall(r"^## (Webhook\w+)$", RUNBOOK.read_text(), re.MULTILINE))
    for rule in rules:
        name, notes = rule["alert"], rule["annotations"]
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        assert notes["summary"] and notes["description"], name
        # A figure from the series ({{ $value }}, a query) or the threshold the rule holds.
        assert re.search(r"\{\{|\d", notes["summary"]), f"{name}: a summary without a number"
        assert notes["runbook_url"].endswith(f"docs/RUNBOOK.md#{name.lower()}"), name
        assert name in sections, f"docs/RUNBOOK.md has no '## {name}' section"
    assert sections == {r["alert"] for r in rules}, "a runbook section without its alert"


def test_the_dashboard_imports_as_is() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["id"] is None and dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    taken: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert 'job=~"$job"' in target["expr"], f"{panel['title']}: not filtered by $job"
