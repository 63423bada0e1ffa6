"""uv.lock is what every install takes (scripts/bootstrap.sh, CI, a deploy): resolved from
PyPI alone (never a machine's local mirror), with the runtime's own needs in it, and the uv
that bootstrap installs is the one the lock pins."""

import re
import tomllib

from tests.support.processes import ROOT

LOCK = tomllib.loads((ROOT / "uv.lock").read_text())
PACKAGES = {package["name"]: package for package in LOCK["package"]}


def test_every_locked_package_comes_from_pypi() -> None:
    sources = {name: package["source"] for name, package in PACKAGES.items()}
    elsewhere = {
        name: source
        for name, source in sources.items()
        if source != {"registry": "https://pypi.org/simple"} and name != "stripe-webhook-ledger"
    }
    assert elsewhere == {}


def test_the_runtime_brings_what_gunicorns_gevent_worker_imports() -> None:
    project = PACKAGES["stripe-webhook-ledger"]
    runtime = {dep["name"]: dep.get("extra", []) for dep in project["dependencies"]}
    assert runtime["gunicorn"] == ["gevent"]
    gevent_extra = {dep["name"] for dep in PACKAGES["gunicorn"]["optional-dependencies"]["gevent"]}
    assert {"gevent", "packaging"} <= gevent_extra


def test_bootstrap_installs_the_locked_uv() -> None:
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    pinned = re.search(r'^UV_VERSION="([^"]+)"$', bootstrap, re.M)
    assert pinned is not None
    assert pinned[1] == PACKAGES["uv"]["version"]
