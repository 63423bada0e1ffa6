"""prove-action's verdicts and its effects probes (ledgerctl/prove_probe.py)."""

import sqlite3
from pathlib import Path

import pytest

from ledger.settings import load
from ledgerctl.cli_prove import checked, not_run, outcome
from ledgerctl.prove_probe import (
    NOT_RUN,
    NoProbe,
    ReversalRow,
    Row,
    cut_off_verdict,
    probe_for,
    refunded_first_verdict,
    reversal_probe_for,
    reversal_verdict,
    verdict,
)
from ledgerctl.prove_reversal import caption as reversal_caption


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


@pytest.mark.parametrize(
    ("effects", "reversals", "state", "expected", "ok"),
    [
        (1, 1, "reversed", "exactly once", True),
        (1, 0, "interrupted", "at most once (interrupted)", True),
        (1, 1, "interrupted", "at most once (interrupted)", True),
        (1, 2, "reversed", "more than once", False),
        (1, 2, "interrupted", "more than once", False),
        (2, 1, "reversed", "more than once", False),
        (1, 0, "reversed", "reversed without a reversal", False),
        (1, 1, "failed", "reversal without reversed", False),
        (1, 0, "fulfilled", "not reversed (fulfilled)", False),
    ],
)
def test_reversal_verdicts(
    effects: int, reversals: int, state: str, expected: str, ok: bool
) -> None:
    assert reversal_verdict(effects, reversals, state) == expected
    assert ReversalRow("fault", "pi_1", 1, effects, 1, reversals, state, expected).ok is ok


@pytest.mark.parametrize(
    ("calls", "effects", "reversals", "state", "expected"),
    [
        (0, 0, 0, "refunded_unfulfilled", "nothing to take back"),
        (1, 0, 0, "refunded_unfulfilled", "fulfilled after its refund"),
        (0, 1, 0, "fulfilled", "fulfilled after its refund"),
        (0, 0, 1, "refunded_unfulfilled", "reversal with nothing to take back"),
        (0, 0, 0, "queued", "not refunded_unfulfilled (queued)"),
    ],
)
def test_a_payment_refunded_first_runs_neither_action(
    calls: int, effects: int, reversals: int, state: str, expected: str
) -> None:
    found = refunded_first_verdict(calls, effects, reversals, state)
    assert found == expected
    row = ReversalRow("fault", "pi_1", calls, effects, 0, reversals, state, found)
    assert row.ok is (expected == "nothing to take back")


@pytest.mark.parametrize(
    ("effects", "reversals", "state", "expected", "ok"),
    [
        (1, 1, "reversed", "exactly once", True),
        (0, 0, "refunded_unfulfilled", "nothing to take back", True),
        (0, 0, "held", "at most once (held)", True),
        (1, 0, "held", "at most once (held)", True),
        (0, 0, "interrupted", "at most once (interrupted)", True),
        (1, 0, "refunded_unfulfilled", "effect left after refunded_unfulfilled", False),
        (0, 1, "refunded_unfulfilled", "reversal with nothing to take back", False),
        (1, 1, "held", "reversal without reversed", False),
        (2, 1, "reversed", "more than once", False),
        (1, 0, "fulfilled", "not reversed (fulfilled)", False),
        (0, 0, "failed", "not reversed (failed)", False),
    ],
)
def test_a_payment_refunded_after_its_call_was_cut_off_is_reversed_voided_or_held(
    effects: int, reversals: int, state: str, expected: str, ok: bool
) -> None:
    assert cut_off_verdict(effects, reversals, state) == expected
    assert ReversalRow("fault", "pi_1", 1, effects, 1, reversals, state, expected).ok is ok


def test_the_sqlite_downstream_counts_its_own_reversals(tmp_path: Path) -> None:
    path = tmp_path / "d.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE reversals (payment_key TEXT)")
        db.executemany("INSERT INTO reversals VALUES (?)", [("pi_a",), ("pi_a",), ("pi_b",)])
    url = f"sqlite:///{path}"
    s = load({"FULFILMENT_ACTION": url, "REVERSAL_ACTION": url})
    probe = reversal_probe_for(s, None, None, None, None)
    assert (probe("pi_a"), probe("pi_b"), probe("pi_c")) == (2, 1, 0)


def test_reversals_sql_runs_where_the_effects_are_counted_by_default(tmp_path: Path) -> None:
    path = tmp_path / "shop.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE revokes (pk TEXT)")
        db.execute("INSERT INTO revokes VALUES ('pi_a')")
    s = load(
        {
            "FULFILMENT_ACTION": "tests.support.broken_actions:insert_every_call",
            "REVERSAL_ACTION": "tests.support.broken_actions:insert_every_call",
        }
    )
    sql = "SELECT count(*) FROM revokes WHERE pk = %(payment_key)s"
    assert reversal_probe_for(s, None, sql, None, f"sqlite:///{path}")("pi_a") == 1
    assert reversal_probe_for(s, None, sql, f"sqlite:///{path}", None)("pi_a") == 1


def test_a_reversal_without_a_built_in_count_needs_a_probe() -> None:
    s = load(
        {"FULFILMENT_ACTION": "sqlite:///d.sqlite3", "REVERSAL_ACTION": "http://127.0.0.1:9/r"}
    )
    with pytest.raises(NoProbe, match="--reversals module:function"):
        reversal_probe_for(s, None, None, None, None)
    with pytest.raises(NoProbe, match="--reversals: cannot import"):
        reversal_probe_for(s, "no_such_module:count", None, None, None)
    unset = load({"FULFILMENT_ACTION": "sqlite:///d.sqlite3"})
    with pytest.raises(NoProbe, match="REVERSAL_ACTION is not set"):
        reversal_probe_for(unset, None, None, None, None)


def test_prove_action_turns_off_what_reads_stripe_s_api(tmp_path: Path) -> None:
    """Its scratch ledger has no STRIPE_API_KEY: a deployment's reads of Stripe's API are
    turned off with it, or the settings' rules would refuse the run."""
    environ = {
        "FULFILMENT_ACTION": f"sqlite:///{tmp_path / 'd.sqlite3'}",
        "STRIPE_API_KEY": "rk_test_x",
        "CHECKOUT_LINE_ITEMS": "true",
        "INVOICE_LINES": "true",
    }
    s = checked(environ)
    assert not (s.STRIPE_API_KEY or s.CHECKOUT_LINE_ITEMS or s.INVOICE_LINES)


def test_the_caption_says_exactly_once_only_when_every_row_was() -> None:
    """A run of only exactly-once rows read "at most once, fulfilled or interrupted"."""
    once = Row("kill", "pi_1", 1, 1, "fulfilled", "exactly once")
    skipped = Row("stall", "pi_2", 0, 0, "", "skipped")
    interrupted = Row("stop", "pi_3", 1, 1, "interrupted", "at most once (interrupted)")
    assert outcome([once, skipped]) == "every payment exactly once"
    assert outcome([once, interrupted]) == (
        "every payment at most once: 1 exactly once, the rest interrupted for a person"
    )


def test_faults_max_seconds_left_out_are_named_apart_from_the_failed_ones() -> None:
    """A row --max-seconds left out proves nothing: named as not run, never as FAILED
    (merchant review: the summary listed them as failed)."""
    once = Row("kill", "pi_1", 1, 1, "fulfilled", "exactly once")
    left = Row("stall", "", 0, 0, "", NOT_RUN, "--max-seconds reached before it")
    assert not left.ok and outcome([once, left]) == "every payment exactly once"
    assert not_run(["stall", "stop"]) == "; not run (--max-seconds): stall, stop"
    assert not_run([]) == ""
    done = ReversalRow("refund", "pi_1", 1, 1, 1, 1, "reversed", "exactly once")
    unrun = ReversalRow("kill", "", 0, 0, 0, 0, "", NOT_RUN, "--max-seconds reached before it")
    assert reversal_caption([done, unrun], True) == (
        "2 reversal fault(s); replay-safe: yes; every payment reversed at most once;"
        " not run (--max-seconds): kill"
    )
