# ruff: noqa: E501  (Markdown table cells are long strings)
"""Render var/bench/latest.json as Markdown (var/bench/latest.md and, with --docs, the marked
region of docs/BENCHMARKS.md).

    .venv/bin/python -m bench.report [--json var/bench/latest.json] [--docs]
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT
from bench.report_primary import fsyncs_line, primary_section
from bench.report_sections import (
    Lines,
    durability_section,
    fulfilment_section,
    intake_section,
    memory_section,
    num,
    ratio,
    sp,
    table,
)

DOC = ROOT / "docs" / "BENCHMARKS.md"
BEGIN, END = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"


def run_header(data: dict[str, Any]) -> Lines:
    """When and how the run was made, and how to read the cells."""
    m = data.get("machine", {})
    return [
        f"Run {m.get('date', '?')} on git {m.get('git', '?')}"
        f"{' (with uncommitted changes)' if m.get('git_dirty') else ''}, "
        f"{'**quick mode** (fewer, shorter runs), ' if data.get('quick') else ''}"
        f"total {num(sum(data.get('section_seconds', {}).values()))} s"
        f"{'; re-run since: ' + ', '.join(f'{k} at {v}' for k, v in data['rerun'].items()) if data.get('rerun') else ''}"
        f". Each cell: median [min–max] of the runs; "
        "ratios are ratios of medians with the range of the per-round paired ratios.",
        "",
    ]


def targets_section(targets: list[dict[str, Any]]) -> Lines:
    """### Targets: each goal, the measured figure, and whether it was met."""
    if not targets:
        return []
    rows = [
        [
            t["target"],
            num(t["measured"], 2 if t["measured"] < 100 else 0),
            t["goal"],
            "yes" if t["met"] else "**missed**",
        ]
        for t in targets
    ]
    return ["### Targets", "", *table(["target", "measured", "goal", "met"], rows)]


def scale_section(scale: dict[str, Any] | None) -> Lines:
    """### 5. Scale: per-delivery cost on a small and a large ledger."""
    if not scale:
        return []
    rows = [
        [
            name,
            f"{num(scale['keys'][name])} keys, {num(scale['used_memory'][name] / 2**20)} MiB",
            sp(s["us_per_call"]),
            sp(s["p99_us"]),
            sp(s["server_us_per_call"], 1),
        ]
        for name, s in scale["summary"].items()
    ]
    r = scale["ratios"]
    return [
        "### 5. Scale",
        "",
        *table(["ledger", "size", "µs per delivery (p50)", "p99 µs", "script µs (Redis)"], rows),
        f"Large / small: wall {ratio(r['wall per delivery'])}, script {ratio(r['script time per delivery'])} (target ≤ 1.2).",
        "",
    ]


def workers_section(workers: dict[str, Any] | None) -> Lines:
    """Intake throughput by number of gunicorn workers."""
    if not workers:
        return []
    rows = [
        [
            name,
            sp(s["rps"]),
            sp(s["p99_ms"], 1),
            sp(s["server_cpu_us_per_req"]),
            ratio(workers["ratios"][f"{name}/1 worker rps"]),
        ]
        for name, s in workers["summary"].items()
    ]
    return [
        "Intake throughput by number of gunicorn workers (ours, gthread, 4 threads each):",
        "",
        *table(
            [
                "gunicorn workers (gthread ×4 threads)",
                "req/s",
                "p99 ms",
                "server CPU µs/req",
                "vs 1 worker",
            ],
            rows,
        ),
    ]


def hostile_section(h: dict[str, Any] | None) -> Lines:
    """### 6: the shipped server before and after the hostile-input work, side by side."""
    if not h or "ratios" not in h:
        return []
    peak, half, forged, r = h["peak"], h["half_load"], h["forged"], h["ratios"]
    label = {
        "before": f"before ({h['before_commit']}, gthread)",
        "after": f"after ({h.get('after_commit', '?')}, gevent)",
    }
    rows = [
        [
            label[n],
            sp(peak[n]["rps"]),
            sp(peak[n]["p99_ms"], 1),
            sp(half[n]["p99_ms"], 1),
            sp(forged[n]["rps"]),
            sp(forged[n]["aof_bytes_per_rejection"]),
            sp(forged[n]["keys_per_rejection"], 3),
        ]
        for n in ("before", "after")
    ]
    return [
        "### 6. Hostile input: the shipped server before and after",
        "",
        f"Each server as shipped by its commit, on its own Redis, in alternating rounds; half load is {num(h['half_load_rate'])} req/s offered to both (half the earlier commit's peak); forged requests are signed with a wrong secret (wrk, 16 connections).",
        "",
        *table(
            [
                "server",
                "peak req/s",
                "peak p99 ms",
                "p99 ms at half load",
                "forged req/s",
                "AOF bytes per rejection",
                "keys per rejection",
            ],
            rows,
        ),
        f"after / before: peak {ratio(r['after/before peak rps'])} (target ≥ 0.9); p99 at half load {ratio(r['after/before p99 at half load'])} (target ≤ 1.1).",
        "",
    ]


def profile_steps(steps: dict[str, Any] | None) -> Lines:
    """Median µs per receiver step, measured in-process."""
    if not steps:
        return []
    return [
        "Receiver steps, median µs per call, in-process, one call at a time (round trips: mean CPU µs per call):",
        "",
        *table(["step", "µs"], [[k, str(v)] for k, v in steps.items()]),
    ]


def spy_table(heading: str, profile: dict[str, Any], per: str) -> Lines:
    """A py-spy profile's buckets: share, microseconds per request or job, where."""
    per_unit = profile[f"us_per_{per}"]
    rows = [[f"{v}%", num(per_unit[k]), k] for k, v in profile["buckets"].items()]
    return [heading, "", *table(["share", f"≈ µs/{per.removesuffix('uest')}", "where"], rows)]


def profile_receiver(rec: dict[str, Any] | None) -> Lines:
    """Where the gunicorn workers spend their time at peak, from py-spy."""
    if not rec:
        return []
    run = rec["run"]
    heading = (
        f"py-spy (--gil) of both gunicorn workers at peak ({num(run['rps'])} req/s, "
        f"{num(run['server_cpu_us_per_req'])} µs CPU per request), {rec['samples']} samples:"
    )
    return spy_table(heading, rec, "request")


def profile_worker(wk: dict[str, Any] | None) -> Lines:
    """Where a SimpleWorker spends its time draining real jobs, from py-spy."""
    if not wk:
        return []
    run = wk["run"]
    heading = (
        f"py-spy (--gil) of one SimpleWorker draining {run['jobs']} real jobs "
        f"({num(run['rate'], 1)} jobs/s, {num(run['cpu_us_per_job'])} µs CPU per job), "
        f"{wk['samples']} samples:"
    )
    return spy_table(heading, wk, "job")


def profile_section(prof: dict[str, Any] | None) -> Lines:
    """### Where the time goes: receiver steps and py-spy profiles."""
    if not prof:
        return []
    return [
        "### Where the time goes",
        "",
        *profile_steps(prof.get("steps_us")),
        *profile_receiver(prof.get("receiver")),
        *profile_worker(prof.get("worker")),
    ]


def machine_section(m: dict[str, Any]) -> Lines:
    """### Machine: hardware, kernel and tool versions."""
    if not m:
        return []
    return [
        "### Machine",
        "",
        "```",
        f"nproc: {m.get('nproc')}",
        *m.get("lscpu", []),
        *m.get("memory", []),
        f"kernel {m.get('kernel')}, Python {m.get('python')}, {m.get('redis')}",
        f"{m.get('wrk')}",
        "packages: " + ", ".join(f"{k} {v}" for k, v in m.get("packages", {}).items()),
        f"work dir filesystem: {m.get('workdir_fs')}",
        "```",
        "",
    ]


def render(data: dict[str, Any]) -> str:
    """The whole report as Markdown, section by section."""
    failed = {name: s for name, s in data.get("sections", {}).items() if "error" in s}
    sec = {name: s for name, s in data.get("sections", {}).items() if name not in failed}
    intake = sec.get("intake", {})
    sections = [
        run_header(data),
        [f"Section {name} failed: `{s['error']}`" for name, s in failed.items()]
        + ([""] if failed else []),
        targets_section(data.get("targets", [])),
        intake_section(intake),
        durability_section(intake),
        fulfilment_section(sec.get("fulfilment")),
        fsyncs_line(sec.get("fulfilment")),
        primary_section(sec.get("primary")),
        memory_section(sec.get("memory")),
        scale_section(sec.get("scale")),
        workers_section(intake.get("workers")),
        hostile_section(sec.get("hostile")),
        profile_section(sec.get("profile")),
        machine_section(data.get("machine", {})),
    ]
    return "\n".join(line for lines in sections for line in lines)


def update_doc(markdown: str, doc: Path = DOC) -> bool:
    """Replace the marked region of docs/BENCHMARKS.md; False if there is no such region."""
    if not doc.exists():
        return False
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        return False
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{markdown}\n{END}{tail}")
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, default=RESULTS / "latest.json")
    p.add_argument("--docs", action="store_true", help="also update docs/BENCHMARKS.md")
    args = p.parse_args(argv)
    md = render(json.loads(args.json.read_text()))
    args.json.with_suffix(".md").write_text(md + "\n")
    if args.docs:
        update_doc(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
