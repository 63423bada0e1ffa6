# ruff: noqa: E501  (Markdown table cells are long strings)
"""Markdown formatting helpers and the renderers of report sections 1–4 (intake, durability,
fulfilment, memory); bench/report.py renders the rest and joins them."""

import math
from typing import Any

Lines = list[str]


def num(v: float | None, digits: int = 0) -> str:
    """A number with thousands separators, or '–' when missing."""
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


def table(head: list[str], rows: list[list[str]]) -> Lines:
    """A Markdown table followed by a blank line."""
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out + [""]


def floors(r: dict[str, Any]) -> str:
    """The bare endpoint plus one Redis round trip, as a share of the bare endpoint."""
    names = ("bare+PING/bare rps", "bare+SET/bare rps", "ours/bare+SET rps")
    return " · ".join(ratio(r[n]) if n in r else "–" for n in names) if names[1] in r else "–"


def stock(r: dict[str, Any]) -> str:
    """Ours under gunicorn's stock gevent worker, where ``ours`` is the shipped class."""
    names = ("ours stock/peer rps", "ours stock/bare rps")
    return " · ".join(ratio(r[n]) for n in names) if names[0] in r else "–"


def intake_peak_rows(classes: dict[str, Any]) -> list[list[str]]:
    """One row per worker class and receiver at peak load."""
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
    return rows


def intake_ratio_row(cls: str, d: dict[str, Any]) -> list[str]:
    """Throughput ratios and half-load latencies of one worker class."""
    r = d["ratios"]
    h = d["half_load"]
    with_set = "ours/bare+SET p99 at half load" in r
    return [
        cls,
        ratio(r["ours/peer rps"]) if "ours/peer rps" in r else "–",
        ratio(r["ours/bare rps"]),
        ratio(r["ours/quickstart rps"]),
        ratio(r["quickstart/bare rps"]),
        ratio(r["ours duplicates/bare rps"]) if "ours duplicates/bare rps" in r else "–",
        stock(r),
        floors(r),
        num(d["half_load_rate"]),
        f"{sp(h['ours']['p50_ms'], 1)} / {sp(h['ours']['p99_ms'], 1)}",
        f"{sp(h['bare']['p50_ms'], 1)} / {sp(h['bare']['p99_ms'], 1)}",
        f"{sp(h['bare_set']['p50_ms'], 1)} / {sp(h['bare_set']['p99_ms'], 1)}" if with_set else "–",
        ratio(r["ours/bare p99 at half load"]),
        ratio(r["ours/bare+SET p99 at half load"]) if with_set else "–",
    ]


def intake_section(intake: dict[str, Any]) -> Lines:
    """### 1. Intake over HTTP: peak throughput and CPU, then ratios and half-load latency."""
    classes = intake.get("worker_classes", {})
    if not classes:
        return []
    cfg = intake.get("config", {})
    lines = [
        "### 1. Intake over HTTP",
        "",
        f"{cfg.get('events', '?')} distinct signed events, mean {cfg.get('mean_event_bytes', '?')} B, "
        f"load from {cfg.get('generator', '?')}, {cfg.get('peak_seconds', '?')} s per run, "
        f"{cfg.get('runs', '?')} rounds alternating ours / bare / quick-start / peer; {cfg.get('gunicorn', '')}. "
        f"Half load: {cfg.get('paced_runs', cfg.get('runs', '?'))} rounds of "
        f"{cfg.get('paced_seconds', '?')} s alternating ours / bare / bare + SET. "
        "CPU is per request: gunicorn (master + workers), Redis, and the load generator; "
        "'other' is the rest of the machine's busy CPU over the run: other processes, the "
        "kernel's interrupt and I/O work, and the harness itself. In the gevent rows, ours "
        "is the shipped server (gunicorn.conf.py's webhook.server.Worker) and ours_stock is "
        "ours under gunicorn's stock gevent worker, which every baseline runs under.",
        "",
    ]
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
        intake_peak_rows(classes),
    )
    lines += table(
        [
            "worker class",
            "ours/peer req/s (≥ 1.77)",
            "ours/bare req/s (≥ 0.35)",
            "ours/quick-start",
            "quick-start/bare",
            "duplicates-only/bare",
            "ours under stock gevent: /peer · /bare",
            "floors: bare+PING/bare · bare+SET/bare · ours/bare+SET",
            "half load req/s",
            "ours p50 / p99 ms",
            "bare p50 / p99 ms",
            "bare+SET p50 / p99 ms",
            "p99 ours/bare",
            "p99 ours/(bare+SET) (≤ 1.5)",
        ],
        [intake_ratio_row(cls, d) for cls, d in classes.items() if "ratios" in d],
    )
    return lines


def durability_section(intake: dict[str, Any]) -> Lines:
    """### 2. Durability cost: intake throughput under each appendfsync policy."""
    dur = intake.get("durability")
    if not dur:
        return []
    lines = ["### 2. Durability cost (gthread, 2 workers)", ""]
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
            for k, v in dur["summary"].items()
        ],
    )
    return lines + [
        f"always / everysec throughput: {ratio(dur['ratios']['always/everysec rps'])} (target ≥ 0.9)",
        "",
    ]


def fulfilment_drain(ful: dict[str, Any]) -> Lines:
    """The queue-drain table and its ratios."""
    lines = table(
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
    return lines + [
        f"ours / trivial (SimpleWorker): {ratio(r['ours/trivial SimpleWorker'])} (target ≥ 0.9); "
        + (
            "the same with a no-op downstream: "
            f"{ratio(r['ours no-op downstream/trivial SimpleWorker'])}; "
            if "ours no-op downstream/trivial SimpleWorker" in r
            else ""
        )
        + (
            "PostgreSQL action / SQLite action: "
            f"{ratio(r['ours PostgreSQL/ours SQLite SimpleWorker'])}; "
            if "ours PostgreSQL/ours SQLite SimpleWorker" in r
            else ""
        )
        + f"SimpleWorker / forking Worker (ours): {ratio(r['ours SimpleWorker/fork Worker'])} (target ≥ 4); "
        f"ours / trivial (forking Worker): {ratio(r['ours/trivial fork Worker'])}.",
        "",
    ]


def fulfilment_latency(lat: dict[str, Any]) -> Lines:
    """The paid-delivery-to-fulfilled latency of the shipped stack at half load."""
    s = lat["summary"]
    return [
        f"First paid delivery → fulfilled, shipped stack (gunicorn with the shipped gevent worker ×2, 2 × SimpleWorker, "
        f"sweeper) at {num(lat['half_load_payments_per_s'])} payments/s "
        f"({num(lat['half_load_payments_per_s'] * lat['events_per_payment'])} events/s) = half of "
        f"min(drain {num(lat['drain_payments_per_s'])}/s, intake {num(lat['intake_peak_payments_per_s'])} payments/s): "
        f"p50 {sp(s['p50_ms'])} ms, p99 {sp(s['p99_ms'])} ms, max {sp(s['max_ms'])} ms "
        f"(HTTP p99 {sp(s['http_p99_ms'], 1)} ms).",
        "",
    ]


def fulfilment_section(ful: dict[str, Any] | None) -> Lines:
    """### 3. Fulfilment: queue drain against no-op jobs, then end-to-end latency."""
    if not ful:
        return []
    cfg = ful["config"]
    lines = [
        "### 3. Fulfilment",
        "",
        f"Drain of {cfg['payments_simple']} queued payments (SimpleWorker) / {cfg['payments_fork']} "
        "(forking Worker) through the real job and the built-in SQLite action (and the "
        "PostgreSQL action into a local server, synchronous_commit on, its effect one order "
        "row), vs the same number of no-op RQ jobs; 2 worker processes each; jobs/s in steady "
        "state (jobs ending between "
        "the 10th and 90th percentile end times); worker CPU includes forked children.",
        "",
    ]
    return lines + fulfilment_drain(ful) + fulfilment_latency(ful["latency"])


def memory_compression_rows(mem: dict[str, Any]) -> list[list[str]]:
    """Compression ratios and the resulting per-event estimate, if measured."""
    comp = mem.get("compression")
    if not comp:
        return []
    held = ", ".join(f"{k} {v:.3f}" for k, v in comp["held_out_files"].items())
    return [
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


def memory_section(mem: dict[str, Any] | None) -> Lines:
    """### 4. Memory: bytes per event, per key kind, per index entry and per payment."""
    if not mem:
        return []
    f = mem["fulfilled_sample"]
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
            f"**{num(f['per_payment_bytes'])}** mean, {100 * f.get('shipping_share', 0):.0f}% with a"
            f" shipping address; max {num(f.get('payment_bytes_max', 0))}, "
            f"{100 * f.get('share_over_512', 0):.0f}% over 512",
        ],
        [
            "the same without the shipping address (a shop shipping nothing)",
            f"**{num(f.get('per_payment_bytes_unshipped', 0))}** mean (target ≤ 757)",
        ],
        ["event hash encoding", str(f["event_hash_encoding"])],
    ]
    rows += memory_compression_rows(mem)
    return [
        f"### 4. Memory ({num(mem['events'])} events, {num(mem['counts']['payments'])} payments)",
        "",
        *table(["what", "bytes"], rows),
    ]
