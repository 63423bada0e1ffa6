"""Re-send Stripe events, signed fresh, the way Stripe would, then show what each layer saw.

    python scripts/replay_events.py --scenario case-study --expect-once
    python scripts/replay_events.py events/ --copies 3 --shuffle --concurrency 16
    python scripts/replay_events.py --generate 200 --copies 3 --concurrency 32 --json run.json

Exit status: 0 ok; 1 when the endpoint refuses the signing secret, or with --expect-once
when a payment's effect count is not exactly 1, an acknowledged delivery is missing from
the ledger or a valid delivery was not acknowledged (the checker row then reads FAILED,
never ok); 2 usage error (a --secret that is not whsec_…); 3 Redis unreachable.
"""

import argparse
import dataclasses
import json
import random
import sys
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError
from rich.progress import Progress
from rich.text import Text

from ledger import settings as settings_module
from ledger.connection import connect
from ledger.events import classify
from ledger.redact import redact
from ledger.settings import fingerprint
from ledgerctl.checker import Findings
from ledgerctl.replay import options, report, sessions, sources
from ledgerctl.replay.options import compression, millis, signing_secret
from ledgerctl.replay.sending import PROBES, Plan, send_all
from ledgerctl.terminal import line, safe_console

console = safe_console(stderr=True)


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
    plan.add_copies(items, args.copies, args.stripe_retries, compression(args))
    for probe in PROBES:
        plan.add_probes(items, probe, getattr(args, probe.replace("-", "_")), rng)
    if args.shuffle:
        rng.shuffle(plan.deliveries)
    return plan


def run(args: argparse.Namespace) -> int:
    settings = settings_module.load_or_exit()  # a wrong setting: one line each, exit 2
    secret = signing_secret(args)  # not a whsec_ secret: one line, exit 2
    shape = options.shape(args)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    redis = connect(settings)
    items = collect(args, redis, rng)
    if not items:
        console.print("no events to send")
        return 2
    if args.serve_sessions:
        served = sessions.serve(args.serve_sessions, items, args.request_timeout)
        console.print(f"{served} Checkout Session(s) given to {args.serve_sessions}")
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
            secret,
            run_id,
            shape,
            on_answer=lambda a: progress.advance(sending) if a.final else None,
            rng=rng,
        )
        send_s = time.monotonic() - began
        by_id = {e["id"]: e for e, _ in items}
        acked_ids = {a.event_id for a in answers if a.kind == "valid" and a.acked}
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
    unacked = sum(1 for a in answers if a.kind == "valid" and a.final and not a.acked)
    notes = report.notes(answers, secret, shape.deadline)
    refused = report.secret_refused(answers)
    # An interrupted payment is surfaced, not hidden, but its effect count is not 1.
    passed = findings.ok and not (unacked or findings.interrupted or refused)
    if not args.quiet:
        safe_console().print(report.table(layers, findings, passed))
        if not settled:
            console.print(Text(f"not settled after {args.settle_timeout}s", "yellow"))
    for note in notes:
        console.print(line(Text("note:", "yellow"), note))
    record = {
        "script": "replay_events.py",
        "version": metadata.version("stripe-webhook-ledger"),
        "run_id": run_id,
        "seed": seed,
        "parameters": {
            **{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "secret": fingerprint(secret),  # which one, never the secret
            "compress": compression(args),  # the one used, also when left to its default
        },
        "timings": {"send_s": round(send_s, 3), "settle_s": round(settle_s, 3), "settled": settled},
        "layers": layers,
        "findings": {**findings.as_dict(), "passed": passed, "unacknowledged": unacked},
        "notes": notes,
    }
    if args.json_path:
        write_json(args.json_path, record)
    if refused or (args.expect_once and not passed):
        print_failing(findings, unacked)
        return 1
    return 0


def print_failing(findings: Findings, unacked: int) -> None:
    """Name every payment and delivery that fails the run, on stderr."""
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
    args = options.parse_args(argv, __doc__ or "")
    try:
        sys.exit(run(args))
    except RedisError as exc:
        console.print(line(Text("Redis unreachable:", "red"), redact(str(exc))))
        sys.exit(3)


if __name__ == "__main__":
    main()
