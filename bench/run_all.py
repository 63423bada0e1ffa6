"""Run every benchmark: raw results in var/bench/ (latest.json, one JSON per section, the
py-spy stacks, latest.md) and the tables into the results region of docs/BENCHMARKS.md.

    .venv/bin/python -m bench.run_all            # everything, about 11 minutes on 2 cores
    .venv/bin/python -m bench.run_all --quick    # fewer, shorter runs (about 6 minutes)
    .venv/bin/python -m bench.run_all --only intake --only memory   # merged into latest

Needs redis-server and wrk (scripts/bench.sh installs both), and for full coverage gevent
and py-spy (``scripts/bootstrap.sh --group bench``; else that worker class / the profile
is skipped). Every process is started on 127.0.0.1 and stopped by PID.
"""

import argparse
import importlib.util
import json
import shutil
import sys
import time
import traceback
from typing import Any

from bench import fulfilment, hostile, intake, memory, primary, profile, report, scale
from bench.common import RESULTS, log, machine, write_json
from bench.load import have_wrk

SECTIONS = {
    "intake": lambda quick: intake.run(quick),
    "fulfilment": lambda quick: fulfilment.run(quick),
    "primary": lambda quick: primary.run(quick),
    "memory": lambda quick: memory.run(quick),
    "scale": lambda quick: scale.run(quick),
    "profile": lambda quick: profile.run(quick),
    "hostile": lambda quick: hostile.run(quick),
}


def preflight() -> list[str]:
    notes = []
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server not found: run scripts/bootstrap.sh first")
    if not have_wrk():
        raise SystemExit("wrk not found: run scripts/bench.sh (or apt-get install -y wrk)")
    if importlib.util.find_spec("gevent") is None:
        notes.append("gevent not installed (scripts/bootstrap.sh): gevent class skipped")
    if not profile.have_pyspy():
        notes.append("py-spy not installed (scripts/bootstrap.sh --group bench): no profile")
    for n in notes:
        log("note:", n)
    return notes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run all benchmarks")
    p.add_argument("--quick", action="store_true", help="fewer and shorter runs")
    p.add_argument("--only", action="append", choices=list(SECTIONS), help="run only these")
    p.add_argument("--no-docs", action="store_true", help="do not update docs/BENCHMARKS.md")
    args = p.parse_args(argv)
    notes = preflight()
    started = time.perf_counter()
    data: dict[str, Any] = {
        "quick": args.quick,
        "machine": machine(),
        "notes": notes,
        "sections": {},
        "section_seconds": {},
    }
    for name in args.only or list(SECTIONS):
        log(f"== {name}")
        t = time.perf_counter()
        try:
            data["sections"][name] = SECTIONS[name](args.quick)
        except Exception as exc:  # keep the other sections' results
            log(f"section {name} failed: {exc!r}")
            data["sections"][name] = {"error": repr(exc), "traceback": traceback.format_exc()}
        data["section_seconds"][name] = round(time.perf_counter() - t, 1)
        write_json(RESULTS / f"{name}.json", data["sections"][name])
    data["seconds"] = round(time.perf_counter() - started, 1)
    latest = RESULTS / "latest.json"
    if args.only and latest.exists():
        # Merge into the previous full run: the other sections keep their results.
        previous = json.loads(latest.read_text())
        if previous.get("quick") == args.quick:
            when = f"{data['machine']['date']} on git {data['machine']['git']}"
            rerun = {name: when for name in data["sections"]}
            previous["sections"].update(data["sections"])
            previous["section_seconds"].update(data["section_seconds"])
            previous.setdefault("rerun", {}).update(rerun)
            data = previous
    data["targets"] = [t for s in data["sections"].values() for t in s.get("targets", [])]
    write_json(RESULTS / "latest.json", data)
    md = report.render(data)
    (RESULTS / "latest.md").write_text(md + "\n")
    if not args.no_docs and report.update_doc(md):
        log("updated docs/BENCHMARKS.md")
    log(f"wrote {RESULTS / 'latest.json'} and latest.md in {data['seconds']:.0f} s")
    for t in data["targets"]:
        verdict = "met   " if t["met"] else "MISSED"
        log(f"  {verdict} {t['target']}: {t['measured']} (goal {t['goal']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
