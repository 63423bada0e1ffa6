"""The package diagram of docs/ARCHITECTURE.md, enforced: what imports what and no cycles
(lint-imports with the contracts in pyproject.toml, which scripts/test.sh also runs; here so
that pytest alone checks them, with a case each contract must catch), and workers and tools
that never load Flask at run time."""

import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.support.processes import ROOT

PACKAGES = ("ledger", "webhook", "workers", "ledgerctl")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONFIG = ROOT / "pyproject.toml"


def lint_imports(cwd: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """lint-imports with the project's contracts ([tool.importlinter] in pyproject.toml) on
    the packages importable from ``cwd``."""
    only = [arg for contract in contracts for arg in ("--contract", contract)]
    command = [LINT_IMPORTS, "--no-cache", "--no-logo", *only, CONFIG]
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env)


def test_the_packages_keep_the_import_contracts() -> None:
    checked = lint_imports(ROOT)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "4 kept, 0 broken" in checked.stdout


CLEAN = {
    "ledger/__init__.py": "",
    "ledger/keys.py": "",
    "ledger/money.py": "from ledger import keys\n",
    "webhook/__init__.py": "import flask\nfrom webhook import http\n",
    "webhook/http.py": "from ledger import money\n",
    "workers/__init__.py": "",
    "workers/jobs.py": "import ledger.money\n",
    "ledgerctl/__init__.py": "",
    "ledgerctl/cli.py": "from workers import jobs\nfrom ledgerctl.replay import main\n",
    "ledgerctl/replay/__init__.py": "",
    "ledgerctl/replay/main.py": "from ledgerctl.replay import client\n",
    "ledgerctl/replay/client.py": "",
}
"""A small copy of the diagram that keeps every contract; each case below breaks one."""

BROKEN = {
    "the core imports a package above it": ("layers", "ledger/keys.py", "import workers.jobs"),
    "workers import webhook (inside a function)": (
        "layers",
        "workers/jobs.py",
        "def run():\n    from webhook import http\n",
    ),
    "webhook imports workers": ("layers", "webhook/http.py", "from workers import jobs"),
    "the tools import webhook": ("tools-without-web", "ledgerctl/cli.py", "import webhook.http"),
    "workers import Flask": ("no-flask-below-web", "workers/jobs.py", "from flask import Flask"),
    "the core imports Werkzeug": ("no-flask-below-web", "ledger/money.py", "import werkzeug"),
    "two core modules import each other": ("acyclic", "ledger/keys.py", "import ledger.money"),
    "a cycle one package down": (
        "acyclic",
        "ledgerctl/replay/client.py",
        "from ledgerctl.replay import main",
    ),
}


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_a_tree_that_follows_the_diagram_keeps_every_contract(tmp_path: Path) -> None:
    write_tree(tmp_path, CLEAN)
    checked = lint_imports(tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(("contract", "name", "line"), BROKEN.values(), ids=list(BROKEN))
def test_each_contract_finds_what_it_exists_for(
    tmp_path: Path, contract: str, name: str, line: str
) -> None:
    write_tree(tmp_path, {**CLEAN, name: CLEAN[name] + line + "\n"})
    checked = lint_imports(tmp_path, contract)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "0 kept, 1 broken" in checked.stdout


def cycles_through_a_package(graph: grimp.ImportGraph) -> list[str]:
    """A package (its ``__init__``) and one of its own modules that import each other, at
    any distance: the one kind of cycle lint-imports' acyclic_siblings contract does not
    see (it compares a package's children, never a child with its parent)."""
    return sorted(
        f"{package} <-> {module}"
        for module in graph.modules
        for package in graph.modules
        if module.startswith(package + ".")
        and graph.chain_exists(importer=module, imported=package)
        and graph.chain_exists(importer=package, imported=module)
    )


def test_no_package_and_its_own_module_import_each_other() -> None:
    assert cycles_through_a_package(grimp.build_graph(*PACKAGES, cache_dir=None)) == []


def test_a_cycle_through_a_package_is_found() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("a", "a.b"), ("a.b", "a.c"), ("a.c", "a"), ("d", "a")]:
        graph.add_import(importer=importer, imported=imported)
    graph.add_module("a.e")
    assert cycles_through_a_package(graph) == ["a <-> a.b", "a <-> a.c"]


@pytest.mark.parametrize(
    "entry",
    [
        "workers.jobs",  # what `rq worker` imports to run fulfil_payment
        "workers.sweeper",
        "workers.worker",  # fulfilment-worker (RQ's SimpleWorker on the ledger's connection)
        "ledgerctl.cli",  # webhook-ledger, which also runs the sweeper
        "ledgerctl.replay.main",
    ],
)
def test_workers_and_tools_never_load_flask(entry: str) -> None:
    code = f"import sys, {entry}; print(sorted(m for m in sys.modules if m.startswith('flask')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"
