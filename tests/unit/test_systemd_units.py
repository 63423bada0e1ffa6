"""deploy/systemd: one unit per Procfile line, each running that line's command after its
wait for Redis, and a worker's stop deadline above what its calls in flight may take (a
SIGKILL before it cuts a call: a payment whose action is not replay-safe then waits for a
person). systemd itself checks the files where it is installed."""

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

from ledger import settings
from tests.support.processes import ROOT

UNITS = ROOT / "deploy" / "systemd"
SERVICES = {
    "web": "webhook-ledger-web.service",
    "worker": "webhook-ledger-worker@.service",
    "sweeper": "webhook-ledger-sweeper.service",
}
INSTALLED = "/srv/webhook-ledger"


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip())


def service(name: str) -> configparser.SectionProxy:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(UNITS / name)
    return unit["Service"]


@pytest.mark.parametrize("line", sorted(SERVICES))
def test_each_unit_runs_its_procfile_line(line: str) -> None:
    unit = service(SERVICES[line])
    wait, command = procfile()[line].split(" && exec ")
    assert unit["execstartpre"] == f"{INSTALLED}/.venv/bin/{wait}"
    assert unit["execstart"] == f"{INSTALLED}/.venv/bin/{command}"
    assert unit["killmode"] == "mixed"  # SIGTERM to the main process alone, which passes it on
    assert unit["environmentfile"] == "/etc/webhook-ledger.env"


def test_a_worker_is_given_time_to_end_its_calls() -> None:
    s = settings.load({}, STRIPE_WEBHOOK_SECRET="whsec_x")
    calls_end = s.FULFILMENT_TIMEOUT + 2 * s.FULFILMENT_KILL_MARGIN_SECONDS
    assert float(service(SERVICES["worker"])["timeoutstopsec"]) > calls_end + 10
    web = float(service(SERVICES["web"])["timeoutstopsec"])
    assert web > 10  # gunicorn.conf.py's graceful_timeout
    target = (UNITS / "webhook-ledger.target").read_text()
    assert all(name.replace("@", "@1") in target for name in SERVICES.values())


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd is not installed")
def test_systemd_finds_nothing_wrong_in_them(tmp_path: Path) -> None:
    for unit in UNITS.iterdir():
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED, str(ROOT)))
    names = [n.replace("@.service", "@1.service") for n in sorted(p.name for p in UNITS.iterdir())]
    found = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(f"./{n}" for n in names)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (found.returncode, found.stdout + found.stderr) == (0, "")
