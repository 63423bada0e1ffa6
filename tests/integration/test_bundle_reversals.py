"""An evidence bundle holds what refunds and disputes took back, and ``verify`` checks it:
every reversal belongs to an effect, no reversal key is recorded twice, a payment refunded
before its fulfilment has no effect. Exported from a real ledger (tests/support/
reversal_ledger.py: the SQLite downstream for both actions), then doctored one relation at
a time (the manifest rewritten, so only the rule can fail)."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledgerctl.bundle import add_to_manifest, export, verify
from tests.support.reversal_ledger import Taken


@pytest.fixture
def bundle(redis: Any, config: dict[str, object], taken: Taken, tmp_path: Path) -> Path:
    downstream = str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///")
    counts = export(redis, tmp_path / "bundle", downstream)
    assert counts["downstream_reversals.json"] == 2  # the refund's and the lost dispute's
    assert counts["downstream_reversal_calls.json"] == 2
    return tmp_path / "bundle"


def doctored(bundle: Path, name: str, change: Callable[[Any], Any]) -> None:
    path = bundle / name
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
    assert add_to_manifest(path)


def payment(records: list[dict[str, Any]], pk: str) -> dict[str, Any]:
    return next(p for p in records if p["payment_key"] == pk)


def test_the_exported_bundle_holds_the_reversals_and_passes(bundle: Path, taken: Taken) -> None:
    result = verify(bundle)
    assert result.failures == []
    records = json.loads((bundle / "payments.json").read_text())
    assert payment(records, taken.reversed)["reversal"]["reversed_at"] is not None
    reversals = json.loads((bundle / "downstream_reversals.json").read_text())
    assert {r["idempotency_key"] for r in reversals} == {
        f"reverse:{taken.reversed}",
        f"reverse:{taken.reinstated}",
    }


def _effect_gone_from_the_ledger(bundle: Path, t: Taken) -> None:
    def change(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        p = payment(records, t.reversed)
        p["fulfilled_at"], p["receipt"] = None, None
        return records

    doctored(bundle, "payments.json", change)


def _effect_gone_from_the_downstream(bundle: Path, t: Taken) -> None:
    for name in ("downstream_orders.json", "downstream_calls.json"):
        doctored(bundle, name, lambda rows: [r for r in rows if r["payment_key"] != t.reversed])


def _a_reversal_key_twice(bundle: Path, t: Taken) -> None:
    doctored(bundle, "downstream_reversals.json", lambda rows: [*rows, rows[0]])


def _unfulfilled_with_a_receipt(bundle: Path, t: Taken) -> None:
    def change(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        p = payment(records, t.unfulfilled)
        p["fulfilled_at"], p["receipt"] = p["state_since"], {"outcome": "applied"}
        return records

    doctored(bundle, "payments.json", change)


def _unfulfilled_with_an_order(bundle: Path, t: Taken) -> None:
    def order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        copy = dict(rows[0], payment_key=t.unfulfilled, idempotency_key=f"fulfil:{t.unfulfilled}")
        return [*rows, copy]

    def call(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [*rows, dict(rows[0], payment_key=t.unfulfilled, id=len(rows) + 1)]

    doctored(bundle, "downstream_orders.json", order)
    doctored(bundle, "downstream_calls.json", call)


DOCTORED: dict[str, tuple[Callable[[Path, Taken], None], str]] = {
    "reversed without an effect in the ledger": (
        _effect_gone_from_the_ledger,
        "reversed without an effect",
    ),
    "reversal without an order downstream": (
        _effect_gone_from_the_downstream,
        "has no effect (no order) to take back",
    ),
    "a reversal key recorded twice": (_a_reversal_key_twice, "recorded 2 times"),
    "refunded_unfulfilled with a receipt": (
        _unfulfilled_with_a_receipt,
        "refunded_unfulfilled but it has an effect",
    ),
    "refunded_unfulfilled with an order downstream": (
        _unfulfilled_with_an_order,
        "refunded_unfulfilled but the downstream holds 1 effect(s)",
    ),
}


@pytest.mark.parametrize("case", DOCTORED.values(), ids=list(DOCTORED))
def test_each_reversal_rule_fails_on_a_doctored_bundle(
    bundle: Path, taken: Taken, case: tuple[Callable[[Path, Taken], None], str]
) -> None:
    doctor, expected = case
    doctor(bundle, taken)
    failures = verify(bundle).failures
    assert any(expected in f for f in failures), failures
    assert not any("manifest" in f or "not as an export writes" in f for f in failures)
