"""docs/CONFIGURATION.md's settings table is the declaration, rendered: a setting added,
changed or documented differently fails here until the table is regenerated."""

import importlib.util
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

from ledger.setting_fields import docs
from ledger.settings import Settings
from ledgerctl.run_local import Local
from tests.support.processes import ROOT
from webhook.serving import Server

SCRIPT = ROOT / "scripts" / "settings_table.py"
_spec = importlib.util.spec_from_file_location("settings_table", SCRIPT)
assert _spec and _spec.loader
settings_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(settings_table)


def test_the_configuration_table_is_the_declaration() -> None:
    text = (ROOT / "docs" / "CONFIGURATION.md").read_text()
    start, end = settings_table.markers(text)
    table = settings_table.table()
    assert text[start:end] == table, f"the settings table is stale: run {settings_table.COMMAND}"


def test_every_setting_has_a_row_with_its_default_and_what_it_does() -> None:
    table = settings_table.table()
    rows = table.splitlines()[2:]
    declared = [f for cls in (Settings, Server, Local) for f in fields(cls)]
    assert [row.split(" | ")[0].strip("|` ") for row in rows] == [f.name for f in declared]
    assert all(row.split(" | ")[3].strip(" |") for row in rows), "a setting without a doc"
    assert "| `MAX_ATTEMPTS` | `5` | a whole number, from 1 to 1000 |" in table
    assert "| `TRUSTED_PROXIES` | unset |" in table
    assert docs(Local)["WORKERS"] == "RQ workers to run."


def test_the_script_prints_the_table_and_writes_it_between_the_markers(tmp_path: Path) -> None:
    shown = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, check=True)
    assert shown.stdout == settings_table.table()
    page = tmp_path / "CONFIGURATION.md"
    begin, end = settings_table.BEGIN, settings_table.END
    page.write_text(f"intro\n{begin}\nan old table\n{end}\nafter\n")
    subprocess.run([sys.executable, SCRIPT, "--write", page], check=True)
    assert page.read_text() == f"intro\n{begin}\n{settings_table.table()}{end}\nafter\n"
