"""An evidence bundle holds what refunds and disputes took back, and ``verify`` checks it:
every reversal belongs to an effect, no reversal key is recorded twice, a payment refunded
before its fulfilment has no effect. Exported from a real ledger (tests/support/
reversal_ledger.py: the SQLite downstream for both actions), then doctored one relation at
a time (the manifest rewritten, so only the rule can fail). With each refund reversed on its
own and a dispute won fulfilled again (``taken_again``): per-refund keys are distinct
reversals, and the second order (``refulfil:{pk}``) is a re-grant, not a second effect."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.downstream import read_downstream
from ledgerctl.bundle import add_to_manifest, export, verify
from tests.support.reversal_ledger import Taken, TakenAgain


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


@pytest.fixture
def bundle_again(redis: Any, config: dict[str, object], taken_again: TakenAgain, tmp_path: Path):
    downstream = str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///")
    counts = export(redis, tmp_path / "bundle", downstream)
    assert counts["downstream_reversals.json"] == 3  # two refunds' and the lost dispute's
    assert counts["downstream_orders.json"] == 3  # two effects and one re-grant
    return tmp_path / "bundle"


def test_per_refund_keys_and_a_regrant_pass(
    bundle_again: Path, config: dict[str, object], taken_again: TakenAgain
) -> None:
    t = taken_again
    assert verify(bundle_again).failures == []
    reversals = json.loads((bundle_again / "downstream_reversals.json").read_text())
    assert {r["idempotency_key"] for r in reversals} == {
        f"reverse:{t.per_refund}:{rid}" for rid in t.refunds
    } | {f"reverse:{t.refulfilled}"}
    orders = json.loads((bundle_again / "downstream_orders.json").read_text())
    assert sorted(o["idempotency_key"] for o in orders if o["payment_key"] == t.refulfilled) == [
        f"fulfil:{t.refulfilled}",
        f"refulfil:{t.refulfilled}",
    ]
    # the replay's checker reads the same file: one effect and one re-grant
    down = read_downstream(str(config["FULFILMENT_ACTION"]).removeprefix("sqlite:///"))
    row = down["payments"][t.refulfilled]
    assert (row["effects"], row["regrants"]) == (1, 1)
    assert down["payments"][t.per_refund]["effects"] == 1


def _a_second_regrant(bundle: Path, t: TakenAgain) -> None:
    again = f"refulfil:{t.refulfilled}"

    def order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        copy = dict(next(r for r in rows if r["idempotency_key"] == again))
        return [*rows, dict(copy, idempotency_key=again + "-x")]

    doctored(bundle, "downstream_orders.json", order)


def _a_regrant_without_its_reversal(bundle: Path, t: TakenAgain) -> None:
    doctored(
        bundle,
        "downstream_reversals.json",
        lambda rows: [r for r in rows if r["payment_key"] != t.refulfilled],
    )


def _a_regrant_call_applied_twice(bundle: Path, t: TakenAgain) -> None:
    again = f"refulfil:{t.refulfilled}"

    def call(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        copy = next(r for r in rows if r["idempotency_key"] == again)
        return [*rows, dict(copy, id=len(rows) + 1)]

    doctored(bundle, "downstream_calls.json", call)


def _a_refund_s_key_twice(bundle: Path, t: TakenAgain) -> None:
    doctored(
        bundle,
        "downstream_reversals.json",
        lambda rows: [*rows, next(r for r in rows if r["payment_key"] == t.per_refund)],
    )


AGAIN: dict[str, tuple[Callable[[Path, TakenAgain], None], str]] = {
    "a second re-grant": (_a_second_regrant, "has 2 re-grant(s) and 1 effect(s)"),
    "a re-grant without its reversal": (
        _a_regrant_without_its_reversal,
        "fulfilled again without a reversal before it",
    ),
    "a re-grant's call applied twice": (
        _a_regrant_call_applied_twice,
        "2 applied calls of its fulfilment again, 1 re-grant(s)",
    ),
    "a refund's reversal key twice": (_a_refund_s_key_twice, "recorded 2 times"),
}


@pytest.mark.parametrize("case", AGAIN.values(), ids=list(AGAIN))
def test_each_regrant_and_per_refund_rule_fails_on_a_doctored_bundle(
    bundle_again: Path,
    taken_again: TakenAgain,
    case: tuple[Callable[[Path, TakenAgain], None], str],
) -> None:
    doctor, expected = case
    doctor(bundle_again, taken_again)
    failures = verify(bundle_again).failures
    assert any(expected in f for f in failures), failures
    assert not any("manifest" in f or "not as an export writes" in f for f in failures)
