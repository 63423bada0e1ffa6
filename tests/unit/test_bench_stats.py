"""The pure statistics behind the benchmark figures (bench/stats.py, bench/drain.py).

No Redis and no processes: these only use the plain functions.
"""

import math
from typing import Any

import pytest

from bench.drain import redis_work_per_job
from bench.stats import alternate, column, pct, ratio_runs, short, spread, target


def test_alternate_runs_variants_in_rounds_and_calls_between_first() -> None:
    calls: list[str] = []

    def variant(name: str) -> Any:
        def run(round_no: int) -> dict[str, Any]:
            calls.append(f"{name}{round_no}")
            return {"name": name, "round": round_no}

        return run

    results = alternate(
        {"A": variant("A"), "B": variant("B"), "C": variant("C")},
        runs=2,
        between=lambda: calls.append("|"),
    )
    assert calls == ["|", "A0", "|", "B0", "|", "C0", "|", "A1", "|", "B1", "|", "C1"]
    assert list(results) == ["A", "B", "C"]
    assert results["B"] == [{"name": "B", "round": 0}, {"name": "B", "round": 1}]


def test_spread_of_known_values_ignores_none() -> None:
    s = spread([4.0, None, 2.0, 6.0, 8.0])  # type: ignore[list-item]
    assert s["median"] == 5.0
    assert (s["min"], s["max"], s["n"]) == (2.0, 8.0, 4)
    assert s["rel_range"] == pytest.approx((8.0 - 2.0) / 5.0)
    assert s["runs"] == [4.0, 2.0, 6.0, 8.0]


def test_spread_of_nothing_has_no_runs() -> None:
    s = spread([])
    assert s["n"] == 0
    assert math.isnan(s["median"]) and math.isnan(s["min"]) and math.isnan(s["max"])


def test_ratio_runs_ratio_of_medians_and_paired_rounds() -> None:
    r = ratio_runs([1.0, 10.0, 100.0], [1.0, 20.0, 50.0])
    assert r["ratio_of_medians"] == pytest.approx(10.0 / 20.0)
    # Paired per round: 1/1, 10/20, 100/50 (unpaired min/max would be 1/50 and 100/1).
    assert r["runs"] == pytest.approx([1.0, 0.5, 2.0])
    assert (r["min"], r["max"], r["median"]) == pytest.approx((0.5, 2.0, 1.0))


def test_ratio_runs_skips_a_zero_denominator() -> None:
    r = ratio_runs([3.0, 4.0, 9.0], [0.0, 2.0, 3.0])
    assert r["n"] == 2
    assert r["runs"] == pytest.approx([2.0, 3.0])
    assert math.isnan(ratio_runs([1.0], [0.0])["ratio_of_medians"])


@pytest.mark.parametrize(
    ("q", "expected"), [(1, 1), (25, 25), (50, 50), (95, 95), (99, 99), (100, 100)]
)
def test_pct_is_nearest_rank(q: float, expected: int) -> None:
    # Nearest rank: the ceil(q / 100 * n)-th smallest value; shuffled input is sorted first.
    values = [float(v) for v in range(100, 0, -1)]
    assert pct(values, q) == expected


def test_pct_small_and_empty_inputs() -> None:
    assert pct([1.0, 2.0, 3.0, 4.0], 75) == 3.0
    assert pct([7.0], 99) == 7.0
    assert math.isnan(pct([], 50))


@pytest.mark.parametrize(
    ("measured", "higher", "met"),
    [(0.75, True, True), (0.76, True, True), (0.74, True, False)],
)
def test_target_higher_is_better(measured: float, higher: bool, met: bool) -> None:
    t = target("ratio", measured, 0.75, higher)
    assert t["met"] is met
    assert t["goal"] == "≥ 0.75"


@pytest.mark.parametrize(("measured", "met"), [(1.5, True), (1.49, True), (1.51, False)])
def test_target_lower_is_better(measured: float, met: bool) -> None:
    t = target("p99", measured, 1.5, False, why="tail")
    assert t["met"] is met
    assert t["goal"] == "≤ 1.5"
    assert (t["target"], t["measured"], t["why"]) == ("p99", measured, "tail")


def test_column_and_short_skip_missing_values() -> None:
    rows: list[dict[str, Any]] = [{"rps": 2.0}, {"rps": None}, {"p50_ms": 1.0}, {"rps": 5.0}]
    assert column(rows, "rps") == [2.0, 5.0]
    assert short({"rps": 1234.5678, "errors": 0, "other": 1}) == "rps=1235 errors=0"


def test_redis_work_per_job_takes_out_harness_calls() -> None:
    before = {"total_commands_processed": 100, "total_reads_processed": 40}
    after = {"total_commands_processed": 1110, "total_reads_processed": 250}
    work = redis_work_per_job(before, after, n=100, harness_calls=10)
    assert work == {
        "redis_commands_per_job": (1010 - 10) / 100,
        "redis_round_trips_per_job": (210 - 10) / 100,
    }
