"""prove-action's verdicts and its effects probes (ledgerctl/prove_probe.py)."""

import sqlite3
from pathlib import Path

import pytest

from ledger.settings import load
from ledgerctl.prove_probe import NoProbe, Row, probe_for, verdict


@pytest.mark.parametrize(
    ("effects", "state", "expected", "ok"),
    [
        (1, "fulfilled", "exactly once", True),
        (0, "interrupted", "at most once (interrupted)", True),
        (1, "interrupted", "at most once (interrupted)", True),
        (2, "fulfilled", "more than once", False),
        (2, "interrupted", "more than once", False),
        (1, "failed", "effect without fulfilled", False),
        (1, "retrying", "effect without fulfilled", False),
        (0, "fulfilled", "fulfilled without an effect", False),
        (0, "failed", "not fulfilled (failed)", False),
    ],
)
def test_verdicts(effects: int, state: str, expected: str, ok: bool) -> None:
    assert verdict(effects, state) == expected
    assert Row("fault", "pi_1", 1, effects, state, expected).ok is ok


def test_the_sqlite_downstream_counts_its_own_orders(tmp_path: Path) -> None:
    path = tmp_path / "d.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE orders (payment_key TEXT)")
        db.executemany("INSERT INTO orders VALUES (?)", [("pi_a",), ("pi_a",), ("pi_b",)])
    probe = probe_for(load({"FULFILMENT_ACTION": f"sqlite:///{path}"}), None, None, None)
    assert (probe("pi_a"), probe("pi_b"), probe("pi_c")) == (2, 1, 0)


def test_effects_sql_takes_psycopg_parameters_on_sqlite_too(tmp_path: Path) -> None:
    path = tmp_path / "shop.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE grants (pk TEXT)")
        db.execute("INSERT INTO grants VALUES ('pi_a')")
    s = load({"FULFILMENT_ACTION": "tests.support.broken_actions:insert_every_call"})
    sql = "SELECT count(*) FROM grants WHERE pk = %(payment_key)s"
    assert probe_for(s, None, sql, f"sqlite:///{path}")("pi_a") == 1


def test_a_kind_without_a_built_in_count_needs_a_probe() -> None:
    s = load({"FULFILMENT_ACTION": "http://127.0.0.1:9/fulfil"})
    with pytest.raises(NoProbe, match="--effects"):
        probe_for(s, None, None, None)
    with pytest.raises(NoProbe, match="cannot import"):
        probe_for(s, "no_such_module:count", None, None)


def test_a_probe_module_raising_on_import_is_named_not_a_traceback(tmp_path, monkeypatch) -> None:
    (tmp_path / "shop_probe.py").write_text("import os\nDB = os.environ['SHOP_PROBE_DB']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    s = load({"FULFILMENT_ACTION": "http://127.0.0.1:9/fulfil"})
    why = "--effects: cannot import shop_probe:count: importing it raised KeyError: 'SHOP_PROBE_DB'"
    with pytest.raises(NoProbe, match=why):
        probe_for(s, "shop_probe:count", None, None)
