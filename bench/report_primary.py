# ruff: noqa: E501  (Markdown table cells are long strings)
"""Section 3b of the report: one primary end to end (bench/primary.py), and section 3's fsyncs."""

from typing import Any

from bench.report_sections import Lines, num, sp, table


def fsyncs_line(ful: dict[str, Any] | None) -> Lines:
    """Redis fsyncs per job of section 3's untimed drains (strace), when they were counted."""
    counted = (ful or {}).get("drain", {}).get("fsyncs_counted") or {}
    if not counted:
        return []
    cells = "; ".join(f"{name}: {num(v, 1)}" for name, v in counted.items())
    return [f"Redis fsyncs per job (one untimed drain each, strace): {cells}.", ""]


def primary_section(p: dict[str, Any] | None) -> Lines:
    """### 3b. What one primary at appendfsync always carries, and the latency at half of it."""
    if not p:
        return []
    cap = p["capacity"]
    lines = [
        "### 3b. One primary end to end",
        "",
        "The shipped stack (gunicorn, 2 fulfilment workers, sweeper) on one Redis primary at "
        "`appendfsync always`, payments sent over HTTP at rising rates (steps of "
        f"{', '.join(str(r) for r in p['config']['rates'])}/s), an instant downstream: a step is "
        "sustained when every payment sent is fulfilled within 1 s of its end and nothing was "
        "refused; quiet when its p99 first paid delivery → fulfilled also stays under 250 ms. "
        "Beside it, the same server's `redis-benchmark` SETs (1 client: one fsync each; 50 clients).",
        "",
    ]
    lines += table(
        [
            "workers",
            "sustained payments/s",
            "quiet payments/s",
            "SET/s, 1 client",
            "SET/s, 50 clients",
        ],
        [
            [
                name,
                sp(c["sustained_payments_per_s"]),
                sp(c["quiet_payments_per_s"]),
                num(c["fsync_bound"].get("set_1_clients_per_s")),
                num(c["fsync_bound"].get("set_50_clients_per_s")),
            ]
            for name, c in cap.items()
        ],
    )
    lat = p["latency_100ms_downstream_at_half"]
    lines += [
        "",
        "First paid delivery → fulfilled with a downstream answering in 100 ms: one call at a time at half of the 20/s two workers carry with it, BatchWorker at half of its sustained rate above:",
        "",
    ]
    lines += table(
        ["workers", "payments/s", "p50 ms", "p99 ms", "all fulfilled"],
        [
            [
                name,
                num(at["payments_per_s"]),
                sp(at["summary"]["p50_ms"]),
                sp(at["summary"]["p99_ms"]),
                "yes" if at["all_fulfilled"] else "no",
            ]
            for name, at in lat.items()
        ],
    )
    return lines + [""]
