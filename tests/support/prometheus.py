"""Debian's real ``prometheus`` for a test: the shipped example config (deploy/prometheus)
with the test's target, token file and short intervals, the shipped rules, on a free
loopback port with its storage in a temp dir; and the metric names that the rules and the
Grafana dashboard use."""

import json
import re
import shutil
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.support.processes import ROOT, free_port, spawn, stop, wait_until

DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
EXAMPLE_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "stripe-webhook-ledger.json"
RUNBOOK_BASE = "https://runbooks.test/stripe-webhook-ledger"
METRIC_NAME = re.compile(r"\bwebhook_[a-z0-9_]+")


def binary(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} is missing: scripts/install_tools.sh installs Debian's prometheus"
    return found


class Prometheus:
    """``prometheus`` scraping ``target`` (host:port) with ``token`` every ``interval``."""

    def __init__(self, workdir: Path, target: str, token: str, interval: str = "1s") -> None:
        self.port = free_port()
        self.workdir = workdir
        self.config = workdir / "prometheus.yml"
        workdir.mkdir(exist_ok=True)
        token_file = workdir / "metrics-token"
        token_file.write_text(token)
        config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
        config["global"].update(
            scrape_interval=interval,
            evaluation_interval=interval,
            external_labels={"runbook_base": RUNBOOK_BASE},
        )
        config["rule_files"] = [str(RULES)]
        (job,) = config["scrape_configs"]
        job["authorization"]["credentials_file"] = str(token_file)
        job["static_configs"] = [{"targets": [target]}]
        self.config.write_text(yaml.safe_dump(config))
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Prometheus":
        argv = [
            binary("prometheus"),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            "--storage.tsdb.retention.time=1h",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        self.proc = spawn(argv, {}, self.workdir / "prometheus.log")
        wait_until(self._ready, 60, 0.2, "prometheus ready")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, "prometheus exited"
        try:
            return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    def api(self, path: str, **params: str) -> Any:
        answer = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        answer.raise_for_status()
        return answer.json()["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def stop(self) -> None:
        stop(self.proc)


def used_metric_names() -> dict[str, set[str]]:
    """Every ``webhook_*`` name the shipped rules (expressions and the queries in their
    annotations) and the Grafana dashboard's queries use, by file."""
    rules = yaml.safe_load(RULES.read_text())
    rule_text = [
        text
        for group in rules["groups"]
        for rule in group["rules"]
        for text in (rule["expr"], *rule.get("annotations", {}).values())
    ]
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [str(v.get("query", "")) for v in dashboard["templating"]["list"]]
    return {
        RULES.name: {n for text in rule_text for n in METRIC_NAME.findall(str(text))},
        DASHBOARD.name: {n for q in queries for n in METRIC_NAME.findall(q)},
    }
