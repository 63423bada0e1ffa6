# ruff: noqa: E501  (Markdown table cells are long strings)
"""Render bench/results/latest.json as Markdown (bench/results/latest.md and the marked
region of docs/BENCHMARKS.md).

    .venv/bin/python -m bench.report [--json bench/results/latest.json]
"""

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, ROOT

DOC = ROOT / "docs" / "BENCHMARKS.md"
BEGIN, END = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"


def num(v: float | None, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if digits == 0:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def sp(s: dict[str, Any] | None, digits: int = 0) -> str:
    """median [min–max] of repeated runs."""
    if not s or not s.get("n"):
        return "–"
    return f"{num(s['median'], digits)} [{num(s['min'], digits)}–{num(s['max'], digits)}]"


def med(s: dict[str, Any] | None, digits: int = 1) -> str:
    """The median alone, for figures that barely vary between runs."""
    return num(s["median"], digits) if s and s.get("n") else "–"


def ratio(r: dict[str, Any], digits: int = 2) -> str:
    """ratio of medians (paired per-round ratios min–max)."""
    return f"**{num(r['ratio_of_medians'], digits)}** ({num(r['min'], digits)}–{num(r['max'], digits)})"


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out + [""]


def floors(r: dict[str, Any]) -> str:
    """The bare endpoint plus one Redis round trip, as a share of the bare endpoint."""
    names = ("bare+PING/bare rps", "bare+SET/bare rps", "ours/bare+SET rps")
    return " · ".join(ratio(r[n]) if n in r else "–" for n in names) if names[1] in r else "–"


def render(data: dict[str, Any]) -> str:
    lines: list[str] = []
    m = data.get("machine", {})
    lines += [
        f"Run {m.get('date', '?')} on git {m.get('git', '?')}"
        f"{' (with uncommitted changes)' if m.get('git_dirty') else ''}, "
        f"{'**quick mode** (fewer, shorter runs), ' if data.get('quick') else ''}"
        f"total {num(sum(data.get('section_seconds', {}).values()))} s"
        f"{'; re-run since: ' + ', '.join(f'{k} at {v}' for k, v in data['rerun'].items()) if data.get('rerun') else ''}"
        f". Each cell: median [min–max] of the runs; "
        "ratios are ratios of medians with the range of the per-round paired ratios.",
        "",
    ]
    targets = data.get("targets", [])
    if targets:
        lines += ["### Targets", ""]
        lines += table(
            ["target", "measured", "goal", "met"],
            [
                [
                    t["target"],
                    num(t["measured"], 2 if t["measured"] < 100 else 0),
                    t["goal"],
                    "yes" if t["met"] else "**missed**",
                ]
                for t in targets
            ],
        )
    sec = data.get("sections", {})
    intake = sec.get("intake", {})
    classes = intake.get("worker_classes", {})
    if classes:
        cfg = intake.get("config", {})
        lines += [
            "### 1. Intake over HTTP",
            "",
            f"{cfg.get('events', '?')} distinct signed events, mean {cfg.get('mean_event_bytes', '?')} B, "
            f"load from {cfg.get('generator', '?')}, {cfg.get('peak_seconds', '?')} s per run, "
            f"{cfg.get('runs', '?')} rounds alternating ours / bare / quick-start; {cfg.get('gunicorn', '')}. "
            "CPU is per request: gunicorn (master + workers), Redis, and the load generator; "
            "'other' is CPU used on the machine by processes the harness did not start.",
            "",
        ]
        rows = []
        for cls, d in classes.items():
            if "skipped" in d:
                rows.append([cls, d["skipped"], "", "", "", "", "", "", ""])
                continue
            for name, s in d["peak"].items():
                rows.append(
                    [
                        cls,
                        name,
                        sp(s["rps"]),
                        sp(s["p50_ms"], 1),
                        sp(s["p99_ms"], 1),
                        sp(s["server_cpu_us_per_req"]),
                        sp(s["redis_cpu_us_per_req"]),
                        sp(s["loadgen_cpu_us_per_req"]),
                        sp(s["other_cores"], 2),
                    ]
                )
        lines += table(
            [
                "worker class",
                "receiver",
                "req/s",
                "p50 ms",
                "p99 ms",
                "server CPU µs/req",
                "Redis CPU µs/req",
                "load gen CPU µs/req",
                "other cores",
            ],
            rows,
        )
        rows = []
        for cls, d in classes.items():
            if "ratios" not in d:
                continue
            r = d["ratios"]
            h = d["half_load"]
            rows.append(
                [
                    cls,
                    ratio(r["ours/bare rps"]),
                    ratio(r["ours/quickstart rps"]),
                    ratio(r["quickstart/bare rps"]),
                    ratio(r["ours duplicates/bare rps"])
                    if "ours duplicates/bare rps" in r
                    else "–",
                    floors(r),
                    num(d["half_load_rate"]),
                    f"{sp(h['ours']['p50_ms'], 1)} / {sp(h['ours']['p99_ms'], 1)}",
                    f"{sp(h['bare']['p50_ms'], 1)} / {sp(h['bare']['p99_ms'], 1)}",
                    ratio(r["ours/bare p99 at half load"]),
                ]
            )
        lines += table(
            [
                "worker class",
                "ours/bare req/s (≥ 0.75)",
                "ours/quick-start",
                "quick-start/bare",
                "duplicates-only/bare",
                "floors: bare+PING/bare · bare+SET/bare · ours/bare+SET",
                "half load req/s",
                "ours p50 / p99 ms",
                "bare p50 / p99 ms",
                "p99 ours/bare (≤ 1.5)",
            ],
            rows,
        )
    dur = intake.get("durability")
    if dur:
        s = dur["summary"]
        lines += ["### 2. Durability cost (gthread, 2 workers)", ""]
        lines += table(
            ["Redis", "req/s", "p50 ms", "p99 ms", "Redis CPU µs/req"],
            [
                [
                    f"appendfsync {k}",
                    sp(v["rps"]),
                    sp(v["p50_ms"], 1),
                    sp(v["p99_ms"], 1),
                    sp(v["redis_cpu_us_per_req"]),
                ]
                for k, v in s.items()
            ],
        )
        lines += [
            f"always / everysec throughput: {ratio(dur['ratios']['always/everysec rps'])} (target ≥ 0.9)",
            "",
        ]
    ful = sec.get("fulfilment")
    if ful:
        cfg = ful["config"]
        lines += [
            "### 3. Fulfilment",
            "",
            f"Drain of {cfg['payments_simple']} queued payments (SimpleWorker) / {cfg['payments_fork']} "
            "(forking Worker) through the real job and the built-in SQLite action, vs the same number "
            "of no-op RQ jobs; 2 worker processes each; jobs/s in steady state (jobs ending between "
            "the 10th and 90th percentile end times); worker CPU includes forked children.",
            "",
        ]
        lines += table(
            [
                "setup",
                "jobs/s",
                "jobs/s whole window",
                "worker CPU µs/job",
                "Redis CPU µs/job",
                "Redis commands · round trips /job",
                "other cores",
            ],
            [
                [
                    name,
                    sp(s["rate"], 1),
                    sp(s.get("rate_whole_window"), 1),
                    sp(s["worker_cpu_us_per_job"]),
                    sp(s["redis_cpu_us_per_job"]),
                    f"{med(s.get('redis_commands_per_job'))} · "
                    f"{med(s.get('redis_round_trips_per_job'))}",
                    sp(s["other_cores"], 2),
                ]
                for name, s in ful["drain"]["summary"].items()
            ],
        )
        r = ful["drain"]["ratios"]
        lines += [
            f"ours / trivial (SimpleWorker): {ratio(r['ours/trivial SimpleWorker'])} (target ≥ 0.8); "
            f"SimpleWorker / forking Worker (ours): {ratio(r['ours SimpleWorker/fork Worker'])} (target ≥ 4); "
            f"ours / trivial (forking Worker): {ratio(r['ours/trivial fork Worker'])}.",
            "",
        ]
        lat = ful["latency"]
        s = lat["summary"]
        lines += [
            f"First paid delivery → fulfilled, shipped stack (gunicorn gthread ×2, 2 × SimpleWorker, "
            f"sweeper) at {num(lat['half_load_payments_per_s'])} payments/s "
            f"({num(lat['half_load_payments_per_s'] * lat['events_per_payment'])} events/s) = half of "
            f"min(drain {num(lat['drain_payments_per_s'])}/s, intake {num(lat['intake_peak_payments_per_s'])} payments/s): "
            f"p50 {sp(s['p50_ms'])} ms, p99 {sp(s['p99_ms'])} ms, max {sp(s['max_ms'])} ms "
            f"(HTTP p99 {sp(s['http_p99_ms'], 1)} ms).",
            "",
        ]
    mem = sec.get("memory")
    if mem:
        f = mem["fulfilled_sample"]
        lines += [
            f"### 4. Memory ({num(mem['events'])} events, {num(mem['counts']['payments'])} payments)",
            "",
        ]
        rows = [
            ["raw payload per event (as sent)", num(mem["raw_bytes_per_event"])],
            [
                "used_memory delta per event, all-in",
                f"{num(mem['bytes_per_event_all_in'])} (**{num(mem['ratio_to_raw'], 2)}×** raw; target ≤ 0.5×)",
            ],
        ]
        rows += [[f"MEMORY USAGE {k}", num(v)] for k, v in mem["memory_usage_by_kind"].items()]
        for k, v in mem["indexes"].items():
            if v.get("per_entry"):
                rows.append([f"{k} per entry ({num(v['entries'])} entries)", num(v["per_entry"])])
        rows += [
            [
                f"fulfilled payment: one hash ({f['payment_hash_fields']} fields, {f['payment_hash_encoding']}), attempts included",
                f"**{num(f['per_payment_bytes'])}** mean (target ≤ 512); max "
                f"{num(f.get('payment_bytes_max', 0))}, {100 * f.get('share_over_512', 0):.0f}% over 512",
            ],
            ["event hash encoding", str(f["event_hash_encoding"])],
        ]
        comp = mem.get("compression")
        if comp:
            held = ", ".join(f"{k} {v:.3f}" for k, v in comp["held_out_files"].items())
            rows += [
                [
                    "payload compressed / raw: generated events · real payloads not in the dictionary",
                    f"{comp['generated_ratio']:.3f} · {held}",
                ],
                [
                    "per event, all-in, if payloads compressed like the worst held-out one (estimate)",
                    f"{num(mem['bytes_per_event_held_out_estimate'])} "
                    f"(**{num(mem['bytes_per_event_held_out_estimate'] / mem['raw_bytes_per_event'], 2)}×** raw)",
                ],
            ]
        lines += table(["what", "bytes"], rows)
    scale = sec.get("scale")
    if scale:
        lines += ["### 5. Scale", ""]
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
        lines += table(
            ["ledger", "size", "µs per delivery (p50)", "p99 µs", "script µs (Redis)"], rows
        )
        r = scale["ratios"]
        lines += [
            f"Large / small: wall {ratio(r['wall per delivery'])}, script {ratio(r['script time per delivery'])} (target ≤ 1.2).",
            "",
        ]
    workers = intake.get("workers")
    if workers:
        lines += [
            "Intake throughput by number of gunicorn workers (ours, gthread, 4 threads each):",
            "",
        ]
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
        lines += table(
            [
                "gunicorn workers (gthread ×4 threads)",
                "req/s",
                "p99 ms",
                "server CPU µs/req",
                "vs 1 worker",
            ],
            rows,
        )
    prof = sec.get("profile")
    if prof:
        lines += ["### Where the time goes", ""]
        if prof.get("steps_us"):
            lines += [
                "Receiver steps, median µs per call, in-process, one call at a time (round trips: mean CPU µs per call):",
                "",
            ]
            lines += table(["step", "µs"], [[k, str(v)] for k, v in prof["steps_us"].items()])
        rec = prof.get("receiver")
        if rec:
            run = rec["run"]
            lines += [
                f"py-spy (--gil) of both gunicorn workers at peak ({num(run['rps'])} req/s, "
                f"{num(run['server_cpu_us_per_req'])} µs CPU per request), {rec['samples']} samples:",
                "",
            ]
            lines += table(
                ["share", "≈ µs/req", "where"],
                [[f"{v}%", num(rec["us_per_request"][k]), k] for k, v in rec["buckets"].items()],
            )
        wk = prof.get("worker")
        if wk:
            run = wk["run"]
            lines += [
                f"py-spy (--gil) of one SimpleWorker draining {run['jobs']} real jobs "
                f"({num(run['rate'], 1)} jobs/s, {num(run['cpu_us_per_job'])} µs CPU per job), {wk['samples']} samples:",
                "",
            ]
            lines += table(
                ["share", "≈ µs/job", "where"],
                [[f"{v}%", num(wk["us_per_job"][k]), k] for k, v in wk["buckets"].items()],
            )
    if m:
        lines += [
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
    return "\n".join(lines)


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
