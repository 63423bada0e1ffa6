"""Statistics of repeated runs: alternation (A B A B), median and spread, paired ratios,
percentiles and target verdicts."""

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bench.common import log


def median(values: Iterable[float]) -> float:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else float("nan")


def spread(values: Iterable[float]) -> dict[str, Any]:
    """Median, min, max and the relative range ((max - min) / median) of repeated runs."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    med = statistics.median(vals)
    return {
        "median": med,
        "min": min(vals),
        "max": max(vals),
        "rel_range": (max(vals) - min(vals)) / med if med else float("nan"),
        "n": len(vals),
        "runs": vals,
    }


def ratio_runs(a: list[float], b: list[float]) -> dict[str, Any]:
    """Ratio of medians, plus the spread of the paired per-round ratios a[i] / b[i]."""
    paired = [x / y for x, y in zip(a, b, strict=False) if x is not None and y]
    out = spread(paired)
    out["ratio_of_medians"] = median(a) / median(b) if median(b) else float("nan")
    return out


def alternate(
    variants: Mapping[str, Callable[[int], dict[str, Any]]],
    runs: int,
    between: Callable[[], None] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Run every variant once per round, A B C A B C ..., ``runs`` rounds."""
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for round_no in range(runs):
        for name, fn in variants.items():
            if between is not None:
                between()
            result = fn(round_no)
            results[name].append(result)
            log(f"  round {round_no + 1}/{runs} {name}: {short(result)}")
    return results


def short(result: Mapping[str, Any]) -> str:
    keys = ("rps", "p50_ms", "p99_ms", "rate", "us_per_call", "errors")
    return " ".join(
        f"{k}={result[k]:.4g}" if isinstance(result.get(k), float) else f"{k}={result[k]}"
        for k in keys
        if k in result
    )


def column(results: list[dict[str, Any]], key: str) -> list[float]:
    return [r[key] for r in results if r.get(key) is not None]


def target(name: str, measured: float, goal: float, higher_is_better: bool, why: str = "") -> dict:
    met = measured >= goal if higher_is_better else measured <= goal
    return {
        "target": name,
        "measured": round(measured, 3),
        "goal": ("≥ " if higher_is_better else "≤ ") + f"{goal:g}",
        "met": bool(met),
        "why": why,
    }


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    # ceil, not round(x + 0.5): Python rounds halves to even, which made whole ranks one high.
    k = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered) / 100) - 1))
    return ordered[k]


def ratios(runs: dict[str, list[dict[str, Any]]], pairs: dict[str, tuple[str, str]]) -> dict:
    """``name: (a, b)`` -> the ratio of a's to b's req/s (paired by round), for each pair."""
    return {
        name: ratio_runs(column(runs[a], "rps"), column(runs[b], "rps"))
        for name, (a, b) in pairs.items()
    }
