"""Re-send Stripe events, signed fresh, the way Stripe would, then show what each layer saw.

    python scripts/replay_events.py --scenario case-study --expect-once
    python scripts/replay_events.py events/ --copies 3 --shuffle --concurrency 16
    python scripts/replay_events.py --generate 200 --copies 3 --concurrency 32 --json run.json

Exit status: 0 ok; 1 with --expect-once when a payment's effect count is not exactly 1 or
an acknowledged delivery is missing from the ledger; 2 usage error; 3 Redis unreachable.
"""

import argparse
import dataclasses
import json
import os
import random
import sys
import time
import uuid
from datetime import datetime
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError
from rich.progress import Progress
from rich.text import Text

from ledger import settings as settings_module
from ledger.connection import connect
from ledger.events import classify
from ledger.redact import redact
from ledgerctl.banner import web_port
from ledgerctl.checker import Findings
from ledgerctl.replay import report, sources
from ledgerctl.replay.sending import PROBES, Plan, send_all
from ledgerctl.terminal import line, safe_console

console = safe_console(stderr=True)


def scenario(name: str) -> dict[str, Any]:
    try:
        text = resources.files("ledgerctl.replay").joinpath("scenarios", f"{name}.json").read_text()
    except FileNotFoundError:
        raise SystemExit(f"unknown scenario {name!r}") from None
    return {k: v for k, v in json.loads(text).items() if k != "description"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "files", nargs="*", type=Path, help="event files: JSON, JSON array, JSON Lines, folders"
    )
    p.add_argument(
        "--scenario", help="case-study, multi-event or storm (ledgerctl/replay/scenarios/)"
    )
    src = p.add_argument_group("sources")
    src.add_argument(
        "--generate", type=int, default=0, metavar="N", help="N generated card payments"
    )
    src.add_argument(
        "--checkout",
        action="store_true",
        help="generated payments also send checkout.session.completed",
    )
    src.add_argument(
        "--only", nargs="+", default=[], metavar="TYPE", help="keep only these event types"
    )
    src.add_argument("--from-ledger", action="store_true", help="events stored in the ledger")
    src.add_argument(
        "--id", nargs="+", default=[], dest="ids", metavar="EVT", help="with --from-ledger"
    )
    src.add_argument("--type", help="with --from-ledger: only this type")
    src.add_argument("--payment", help="with --from-ledger: the events of this payment")
    src.add_argument(
        "--since", help="with --from-ledger: first delivered at or after (ISO or epoch ms)"
    )
    src.add_argument(
        "--until", help="with --from-ledger: first delivered at or before (ISO or epoch ms)"
    )
    out = p.add_argument_group("target and signing")
    out.add_argument("--url", default=f"http://127.0.0.1:{web_port(os.environ)}/webhooks/stripe")
    out.add_argument(
        "--secret", help="signing secret (default: STRIPE_WEBHOOK_SECRET, else var/dev.env)"
    )
    shape = p.add_argument_group("delivery shape")
    shape.add_argument("--copies", type=int, default=1, help="valid deliveries per event")
    shape.add_argument("--shuffle", action="store_true")
    shape.add_argument("--seed", type=int, default=None)
    shape.add_argument("--concurrency", type=int, default=1)
    shape.add_argument("--delay", type=float, default=0.0, help="seconds before each request")
    shape.add_argument(
        "--jitter", type=float, default=0.0, help="up to this many extra seconds, random"
    )
    shape.add_argument(
        "--stripe-retries",
        type=int,
        default=0,
        metavar="N",
        help="deliver each event N times on Stripe's backoff schedule",
    )
    shape.add_argument(
        "--compress",
        type=float,
        default=86400.0,
        help="time compression of --stripe-retries (default: a day per second)",
    )
    for probe in PROBES:
        shape.add_argument(f"--{probe}", type=int, default=0, metavar="N", help=f"N {probe} probes")
    rep = p.add_argument_group("report")
    rep.add_argument(
        "--downstream-db", help="SQLite record of effects (default: FULFILMENT_ACTION's, if SQLite)"
    )
    rep.add_argument(
        "--settle-timeout", type=float, default=60.0, help="seconds to wait for fulfilment"
    )
    rep.add_argument("--no-wait", action="store_true", help="do not wait for fulfilment")
    rep.add_argument("--json", type=Path, dest="json_path", help="write the report as JSON here")
    rep.add_argument(
        "--expect-once",
        action="store_true",
        help="exit 1 unless each payment has one effect and nothing acknowledged is missing",
    )
    rep.add_argument("--quiet", action="store_true", help="no progress, no table")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = parser()
    first = p.parse_args(argv)
    if first.scenario:
        p.set_defaults(**scenario(first.scenario))
        return p.parse_args(argv)
    return first


def millis(value: str | None) -> int | None:
    if value is None:
        return None
    return int(value) if value.isdigit() else int(datetime.fromisoformat(value).timestamp() * 1000)


def signing_secret(args: argparse.Namespace) -> str:
    if args.secret:
        return str(args.secret)
    configured = settings_module.load_or_exit().secrets
    if configured:
        return configured[0]
    dev = Path("var/dev.env")
    if dev.exists():
        for line in dev.read_text().splitlines():
            if line.startswith("DEV_WEBHOOK_SECRET="):
                return line.split("=", 1)[1]
    raise SystemExit("no signing secret: pass --secret or set STRIPE_WEBHOOK_SECRET")


def collect(args: argparse.Namespace, redis: Any, rng: random.Random) -> list[sources.Item]:
    items = list(sources.from_files(args.files))
    if args.from_ledger:
        items += sources.from_ledger(
            redis, args.ids, args.type, args.payment, millis(args.since), millis(args.until)
        )
    if args.generate:
        items += sources.generated(args.generate, rng, args.checkout)
    if args.only:
        items = [item for item in items if item[0].get("type") in args.only]
    return items


def plan_for(args: argparse.Namespace, items: list[sources.Item], rng: random.Random) -> Plan:
    plan = Plan()
    plan.add_copies(items, args.copies, args.stripe_retries, args.compress)
    for probe in PROBES:
        plan.add_probes(items, probe, getattr(args, probe.replace("-", "_")), rng)
    if args.shuffle:
        rng.shuffle(plan.deliveries)
    return plan


def run(args: argparse.Namespace) -> int:
    settings = settings_module.load_or_exit()  # a wrong setting: one line each, exit 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    redis = connect(settings)
    items = collect(args, redis, rng)
    if not items:
        console.print("no events to send")
        return 2
    plan = plan_for(args, items, rng)
    event_ids = sorted({e["id"] for e, _ in items})
    before, counts_before = (
        report.summary_now(redis, settings.QUEUE_NAME),
        report.event_counts(redis, event_ids),
    )
    run_id = uuid.uuid4().hex[:12]
    with Progress(console=console, disable=args.quiet, transient=True) as progress:
        sending = progress.add_task("sending", total=len(plan.deliveries))
        began = time.monotonic()
        answers = send_all(
            plan,
            args.url,
            signing_secret(args),
            run_id,
            args.concurrency,
            args.delay,
            args.jitter,
            on_answer=lambda _: progress.advance(sending),
            rng=rng,
        )
        send_s = time.monotonic() - began
        by_id = {e["id"]: e for e, _ in items}
        acked_ids = {a.event_id for a in answers if a.kind == "valid" and 200 <= a.status < 300}
        # The event table says which payments were paid; the ledger says which of them the
        # server holds for a person (its STRIPE_MODE, FULFIL_CONNECT...): those are not
        # expected to fulfil.
        any_mode = dataclasses.replace(settings.policy, mode="any", connect=True)
        classified = (classify(by_id[i], any_mode) for i in acked_ids)
        paid = {c.payment_key for c in classified if c.paid and c.payment_key}
        paid -= report.held(redis, paid)
        settle_s, settled = 0.0, True
        if not args.no_wait and paid:
            waiting = progress.add_task("fulfilling", total=len(paid))
            began = time.monotonic()
            settled = report.wait_settled(
                redis,
                sorted(paid),
                args.settle_timeout,
                lambda done: progress.update(waiting, completed=done),
            )
            settle_s = time.monotonic() - began
    after = report.summary_now(redis, settings.QUEUE_NAME)
    counts_after = report.event_counts(redis, event_ids)
    recorded = {e: counts_after[e] - counts_before[e] for e in event_ids}
    db = report.downstream_db(settings, args.downstream_db)
    layers, findings = report.build(answers, before, after, recorded, paid, redis, db)
    if not args.quiet:
        safe_console().print(report.table(layers, findings))
        if not settled:
            console.print(Text(f"not settled after {args.settle_timeout}s", "yellow"))
    record = {
        "script": "replay_events.py",
        "version": metadata.version("stripe-webhook-ledger"),
        "run_id": run_id,
        "seed": seed,
        "parameters": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k != "secret"
        },
        "timings": {"send_s": round(send_s, 3), "settle_s": round(settle_s, 3), "settled": settled},
        "layers": layers,
        "findings": findings.as_dict(),
    }
    if args.json_path:
        write_json(args.json_path, record)
    unacked = sum(1 for a in answers if a.kind == "valid" and not 200 <= a.status < 300)
    # An interrupted payment is surfaced, not hidden, but its effect count is not 1.
    if args.expect_once and (unacked or not findings.ok or findings.interrupted):
        print_failing(findings, unacked)
        return 1
    return 0


def print_failing(findings: Findings, unacked: int) -> None:
    """Name every payment and delivery that fails ``--expect-once``, on stderr."""
    failing = Text("failing:", "red")
    for item in findings.duplicated + findings.lost:
        console.print(line(failing, item))
    for pk in findings.unfulfilled + findings.unexpected + findings.interrupted:
        console.print(line(failing, pk))
    if unacked:
        console.print(line(failing, f"{unacked} valid deliveries were not acknowledged"))


def write_json(path: Path, record: dict[str, Any]) -> None:
    """Write the report; inside an evidence bundle, also add it to the bundle's manifest."""
    from ledgerctl.bundle import add_to_manifest

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True, default=str))
    add_to_manifest(path)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        sys.exit(run(args))
    except RedisError as exc:
        console.print(line(Text("Redis unreachable:", "red"), redact(str(exc))))
        sys.exit(3)


if __name__ == "__main__":
    main()
