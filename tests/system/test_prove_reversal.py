"""``webhook-ledger prove-action`` with REVERSAL_ACTION, as a user runs it: after the
fulfilment rows, payments fulfilled, then refunded in full or lost in a dispute, their
reversal run under the same faults and counted, and a reversal applied twice caught with
exit 1."""

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from examples.shop import migrate as migrate_shop
from tests.support.broken_actions import make_every_call_shop
from tests.support.processes import ROOT
from tests.system.test_prove_action import prove, verdicts

REFUNDED_FIRST = (
    "refunded in full before its paid event",
    "refunded in full while queued, before any worker took it",
)
TAKE_BACK_ROWS = 4
"""A refund in full and a dispute lost, each delivered three times in turn and four at once."""
CUT_OFF = "refunded in full after its fulfilment call was killed"
REVERSAL_ROWS = len(REFUNDED_FIRST) + TAKE_BACK_ROWS + 8 + 1
"""Those, the faults (before, three inside, after, paused, late answer, resent) and the
refund after the fulfilment's own call was cut off."""


def reversal_rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["fault"]: row for row in report["reversal_rows"]}


def reversed_once(code: int, report: dict[str, Any], stderr: str) -> dict[str, dict[str, Any]]:
    """Exit 0, every fulfilment row exactly once, every payment taken back reversed exactly
    once with one effect, neither action called for those refunded first, and the one
    refunded after its call was cut off settled by the built-in action: reversed, or its
    key voided with no effect; the rows of the payments reversed."""
    assert code == 0, stderr
    assert set(verdicts(report).values()) == {"exactly once"}, report
    rows = reversal_rows(report)
    assert len(rows) == REVERSAL_ROWS, rows
    for name in REFUNDED_FIRST:
        first = rows.pop(name)
        assert first["verdict"] == "nothing to take back", first
        assert (first["calls"], first["reversal_calls"], first["reversals"]) == (0, 0, 0), first
        assert first["state"] == "refunded_unfulfilled", first
    (cut_off,) = [name for name in rows if name.startswith(CUT_OFF)]
    assert rows[cut_off]["calls"] == 1, rows[cut_off]
    if rows[cut_off]["state"] != "reversed":
        voided = rows.pop(cut_off)
        assert voided["verdict"] == "nothing to take back", voided
        assert voided["state"] == "refunded_unfulfilled", voided
        assert voided["note"] == "settled: its key voided, no effect can follow", voided
        assert (voided["effects"], voided["reversal_calls"], voided["reversals"]) == (0, 0, 0)
    assert {row["verdict"] for row in rows.values()} == {"exactly once"}, rows
    assert {(row["effects"], row["reversals"], row["state"]) for row in rows.values()} == {
        (1, 1, "reversed")
    }
    return rows


@pytest.mark.timeout(400)
def test_a_replay_safe_sqlite_reversal_is_exactly_once_in_every_row(tmp_path: Path) -> None:
    """The built-in SQLite downstream for both: its ``reversals`` counted, each order marked
    reversed once; each fault inside, after or past the reversal's call made it again."""
    path = tmp_path / "d.sqlite3"
    url = f"sqlite:///{path}"
    code, report, stderr = prove({"FULFILMENT_ACTION": url, "REVERSAL_ACTION": url}, timeout=380)
    rows = reversed_once(code, report, stderr)
    assert report["reversal_replay_safe"] is True
    calls = {name: row["reversal_calls"] for name, row in rows.items() if CUT_OFF not in name}
    assert {calls.pop(name) for name in list(calls)[:TAKE_BACK_ROWS]} == {1}, calls
    assert calls.pop("killed before the reversal call") == 1
    assert set(calls.values()) == {2}, calls
    with sqlite3.connect(path) as db:
        reversed_orders = dict(
            db.execute(
                "SELECT payment_key, count(*) FROM orders WHERE reversed_at IS NOT NULL"
                " GROUP BY payment_key"
            ).fetchall()
        )
    assert reversed_orders == {row["payment"]: 1 for row in rows.values()}


@pytest.mark.timeout(400)
def test_the_shop_s_revoke_on_postgres_is_exactly_once_by_the_built_in_counts(
    postgres_url: str,
) -> None:
    """examples/shop's grant.sql and revoke.sql: the key table counts the fulfilment's and the
    reversal's keys apart, and each entitlement prove-action took back is revoked."""
    migrate_shop(postgres_url)
    shop = ROOT / "examples" / "shop"
    env = {
        "FULFILMENT_ACTION": postgres_url,
        "FULFILMENT_SQL": f"@{shop / 'grant.sql'}",
        "REVERSAL_ACTION": postgres_url,
        "REVERSAL_SQL": f"@{shop / 'revoke.sql'}",
    }
    rows = reversed_once(*prove(env, timeout=380))
    with psycopg.connect(postgres_url) as conn:
        found = conn.execute(
            "SELECT payment_key FROM entitlements WHERE revoked_at IS NOT NULL"
        ).fetchall()
    assert {pk for (pk,) in found} == {row["payment"] for row in rows.values()}


@pytest.mark.timeout(400)
def test_a_reversal_applied_again_on_a_resend_is_caught(tmp_path: Path) -> None:
    """A reversal that inserts a row per call, wrongly declared replay-safe: copies of the
    take-back are absorbed by the ledger, but a reversal call made again (the worker killed
    after it, its answer late, a resend) reverses twice: exit 1, those rows named."""
    shop = make_every_call_shop(str(tmp_path / "shop.sqlite3"))
    env = {
        "FULFILMENT_ACTION": f"sqlite:///{tmp_path / 'd.sqlite3'}",
        "REVERSAL_ACTION": "tests.support.broken_actions:revoke_every_call_declared_safe",
        "SHOP_DB": shop,
    }
    code, report, stderr = prove(
        env, "--reversals", "tests.support.broken_actions:revokes_of", timeout=380
    )
    assert code == 1, stderr
    assert set(verdicts(report).values()) == {"exactly once"}, report
    assert report["reversal_replay_safe"] is True
    found = {name: row["verdict"] for name, row in reversal_rows(report).items()}
    assert found["killed after the reversal call"] == "more than once"
    assert found["reversal resent with the same idempotency key"] == "more than once"
    late = [v for f, v in found.items() if f.startswith("reversal answered after")]
    assert late == ["more than once"], found
    assert found["full refund delivered 4 times at once"] == "exactly once"
    assert found["dispute lost delivered 3 times in turn"] == "exactly once"


@pytest.mark.timeout(400)
def test_the_same_reversal_not_replay_safe_is_at_most_once_with_interrupted(
    tmp_path: Path,
) -> None:
    """Not declared replay-safe, the same reversal is never made twice: wherever its call may
    have run the payment waits interrupted for a person, one reversal at most; no resend."""
    shop = make_every_call_shop(str(tmp_path / "shop.sqlite3"))
    env = {
        "FULFILMENT_ACTION": f"sqlite:///{tmp_path / 'd.sqlite3'}",
        "REVERSAL_ACTION": "tests.support.broken_actions:revoke_every_call",
        "SHOP_DB": shop,
    }
    revokes = "SELECT count(*) FROM revokes WHERE payment_key = %(payment_key)s"
    code, report, stderr = prove(
        env, "--reversals-sql", revokes, "--reversals-db", f"sqlite:///{shop}", timeout=380
    )
    assert code == 0, stderr
    assert report["reversal_replay_safe"] is False
    rows = reversal_rows(report)
    after = rows["killed after the reversal call"]
    assert (after["state"], after["reversals"], after["verdict"]) == (
        "interrupted",
        1,
        "at most once (interrupted)",
    )
    assert rows["reversal resent with the same idempotency key"]["verdict"] == "skipped"
    assert all(row["reversals"] <= 1 and row["reversal_calls"] <= 1 for row in rows.values())


def test_a_reversal_action_without_a_count_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    env = {
        "FULFILMENT_ACTION": f"sqlite:///{tmp_path / 'd.sqlite3'}",
        "REVERSAL_ACTION": "http://127.0.0.1:9/reverse",
    }
    code, report, stderr = prove(env)
    assert (code, report) == (2, {}), stderr
    assert "REVERSAL_ACTION is a http action: give --reversals" in stderr
