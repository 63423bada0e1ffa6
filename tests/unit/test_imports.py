"""The package diagram of docs/ARCHITECTURE.md, enforced: what imports what, no cycles, and
workers that never load Flask."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import ROOT

ALLOWED = {
    "ledger": set(),
    "webhook": {"ledger"},
    "workers": {"ledger"},
    "ledgerctl": {"ledger", "workers"},
}
"""Package -> the first-party packages it may import. The arrows only point down."""


def modules() -> dict[str, Path]:
    """Every first-party module by dotted name (a package by its own name)."""
    found = {}
    for package in ALLOWED:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The first-party modules ``name`` imports, anywhere in it (inside functions too)."""
    out = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                )
            out |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {m for m in out if m in known}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_packages_import_only_what_the_diagram_allows() -> None:
    wrong = sorted(
        f"{name} imports {target}"
        for name, targets in graph().items()
        for target in targets
        if (p := name.split(".")[0]) != (q := target.split(".")[0]) and q not in ALLOWED[p]
    )
    assert wrong == []


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in edges:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


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
