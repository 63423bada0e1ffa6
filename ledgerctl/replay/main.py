"""Re-send Stripe events, signed fresh, the way Stripe would, then show what each layer saw.

    python scripts/replay_events.py --scenario case-study --expect-once
    python scripts/replay_events.py events/ --copies 3 --shuffle --concurrency 16
    python scripts/replay_events.py --generate 200 --copies 3 --concurrency 32 --json run.json

    python scripts/replay_events.py --scenario refunds --expect-once

Exit status: 0 ok; 1 when the endpoint refuses the signing secret, or with --expect-once
when a payment's effect count is not exactly 1 (0 for one refunded before its fulfilment),
a payment taken back (refunded in full, a dispute lost) is not reversed exactly once or a
reversal has no effect to take back, an acknowledged delivery is missing from the ledger
or a valid delivery was not acknowledged (the checker row then reads FAILED, never ok);
2 usage error (a --secret that is not whsec_…, an event file that is missing or holds no
events, an unknown --scenario, a --json file that cannot be written, a --serve-sessions
URL that is no stand-in), before anything is sent; 3 Redis unreachable: at the start,
before anything is sent (the ledger is read first), or later (what was sent stands; no
report), or the SQLite file effects are counted from (--downstream-db) unreadable, once
everything was sent.

The ledger it reads: REDIS_URL (or REDIS_SENTINELS), else 127.0.0.1:REDIS_PORT (6389), as
scripts/run.sh starts it; --url's default: 127.0.0.1:WEB_PORT (8000). Beside a run.sh given
other settings, `. var/run.env` (its banner names it) sets both.
"""

import argparse
import dataclasses
import json
import random
import sys
import time
import uuid
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError
from rich.progress import Progress, TaskID
from rich.text import Text

from ledger.connection import connect, describe
from ledger.downstream import DownstreamUnusable
from ledger.events import classify
from ledger.redact import redact
from ledger.setting_fields import exit_with
from ledger.settings import Settings, fingerprint
from ledgerctl import takebacks
from ledgerctl.replay import failing, options, report, sessions, sources
from ledgerctl.replay.downstream_source import downstream_record, effects_probe
from ledgerctl.replay.options import compression, millis, signing_secret
from ledgerctl.replay.sending import PROBES, Answer, Plan, send_all
from ledgerctl.run_local import ledger_settings
from ledgerctl.terminal import line, safe_console

console = safe_console(stderr=True)


def say_error(what: str, *said: object) -> None:
    """One line on stderr, never wrapped: a path or URL in it stays whole."""
    console.print(line(Text(what, "red"), *said), soft_wrap=True)


YEAR_S = 365 * 86_400


def collect(args: argparse.Namespace, redis: Any, rng: random.Random) -> list[sources.Item]:
    """The events to send; BadSource or RedisError (no ledger to read back) before any is."""
    items = list(sources.from_files(args.files))
    if args.from_ledger:
        items += sources.from_ledger(
            redis, args.ids, args.type, args.payment, millis(args.since), millis(args.until)
        )
    if args.generate:
        # A seed given repeats the events byte for byte, created too: a second run's are
        # duplicates, as Stripe's copies are, not conflicting copies (other bytes, same id).
        created = None if args.seed is None else sources.SEEDED_CREATED + args.seed % YEAR_S
        items += sources.generated(args.generate, rng, args.checkout, created=created)
    if args.only:
        items = [item for item in items if item[0].get("type") in args.only]
    if items:
        redis.ping()
    return items


def plan_for(
    args: argparse.Namespace, items: list[sources.Item], rng: random.Random, probes: bool
) -> Plan:
    plan = Plan()
    plan.add_copies(items, args.copies, args.stripe_retries, compression(args))
    for probe in PROBES if probes else ():
        plan.add_probes(items, probe, getattr(args, probe.replace("-", "_")), rng)
    if args.shuffle:
        rng.shuffle(plan.deliveries)
    return plan


def waves(args: argparse.Namespace, items: list[sources.Item], rng: random.Random) -> list[Any]:
    """What is sent, in turn, each wave once the one before is settled: the events, then
    (``--refunds``) the payments' refunds and disputes, or each right after its payment's own
    events (``--race-refunds``), then what follows them (a dispute lost, then won)."""
    later = (
        sources.refunds_and_disputes(items, rng, tuple(args.refund_kinds)) if args.refunds else []
    )
    first, then = (later[0], later[1:]) if later else ({}, [])
    sent = [sources.right_after(items, first)] if args.race_refunds else [items, flat(first)]
    return [wave for wave in sent + [flat(more) for more in then] if wave]


def flat(by_payment: dict[str, list[sources.Item]]) -> list[sources.Item]:
    return [item for group in by_payment.values() for item in group]


def run(args: argparse.Namespace) -> int:
    settings = ledger_settings()  # a wrong setting: one line each, exit 2
    secret = signing_secret(args)  # not a whsec_ secret: one line, exit 2
    if args.json_path:
        options.check_writable("--json", args.json_path)  # else one line, exit 2
    shape = options.shape(args)
    counted_by = effects_probe(settings, args.effects_sql, args.effects_db)  # else exit 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    redis = connect(settings)
    try:
        items = collect(args, redis, rng)
    except sources.BadSource as exc:  # before anything is sent
        exit_with([str(exc)])
    except RedisError as exc:  # before anything is sent, too
        where = f"(the ledger at {describe(settings)}); nothing was sent"
        say_error("Redis unreachable:", redact(str(exc)), where)
        return 3
    if not items:
        console.print("no events to send")
        return 2
    if args.serve_sessions:
        try:
            served = sessions.serve(args.serve_sessions, items, args.request_timeout)
        except sessions.NoStandIn as exc:  # before anything is sent
            exit_with([str(exc)])
        console.print(f"{served} Checkout Session(s) given to {args.serve_sessions}")
    sent_waves = waves(args, items, rng)
    by_id = {e["id"]: e for wave in sent_waves for e, _ in wave}
    event_ids = sorted(by_id)
    before, counts_before = (
        report.summary_now(redis, settings.QUEUE_NAME),
        report.event_counts(redis, event_ids),
    )
    run_id = uuid.uuid4().hex[:12]
    answers: list[Answer] = []
    paid: set[str] = set()
    held: set[str] | None = None
    send_s = settle_s = 0.0
    settled = True
    with Progress(console=console, disable=args.quiet, transient=True) as progress:
        for n, wave in enumerate(sent_waves):
            plan = plan_for(args, wave, rng, probes=n == 0)
            sending = progress.add_task("sending", total=len(plan.deliveries))
            began = time.monotonic()
            answers += send_all(
                plan,
                args.url,
                secret,
                run_id,
                shape,
                on_answer=partial(advance_final, progress, sending),
                rng=rng,
            )
            send_s += time.monotonic() - began
            # The event table says which payments were paid; the ledger says which of them
            # the server holds for a person (its STRIPE_MODE, FULFIL_CONNECT...): those are
            # not expected to fulfil.
            paid = paid_of(answers, by_id, settings)
            held = report.held(redis, paid) if held is None else held
            paid -= held
            if not args.no_wait and paid:
                waiting = progress.add_task("settling", total=len(paid))
                began = time.monotonic()
                settled = (
                    report.wait_settled(
                        redis,
                        sorted(paid),
                        args.settle_timeout,
                        partial(show_done, progress, waiting),
                    )
                    and settled
                )
                settle_s += time.monotonic() - began
    after = report.summary_now(redis, settings.QUEUE_NAME)
    counts_after = report.event_counts(redis, event_ids)
    recorded = {e: counts_after[e] - counts_before[e] for e in event_ids}
    db, db_note = downstream_record(settings, args.downstream_db, redis, sorted(paid))
    if counted_by is not None:  # the merchant's own tables, by --effects-sql
        db, db_note = None, None
    acked_ids = {a.event_id for a in answers if a.kind == "valid" and a.acked}
    sent = [by_id[i] for i in sorted(acked_ids)]
    each = takebacks.reversals_due_each(sent) if settings.REVERSAL_PER_REFUND else None
    taken = takebacks.taken_back(sent)
    undo = report.Undo(
        taken,
        settings.reversal_on,
        report.reversal_db(settings, db),
        each,
        frozenset(takebacks.won_after_loss(sent)),
        settings.REVERSAL_DISPUTE_WON == "fulfil",
        frozenset(takebacks.given_back_by_refund(sent)),
    )
    layers, findings, reversals = report.build(
        answers, before, after, recorded, paid, redis, db, undo, counted_by
    )
    unacked = sum(1 for a in answers if a.kind == "valid" and a.final and not a.acked)
    notes = report.notes(answers, secret, shape.deadline) + ([db_note] if db_note else [])
    refused = report.secret_refused(answers)
    # A payment waiting for a person is surfaced, not hidden, but its count is not 1.
    passed = (
        findings.ok
        and reversals.ok
        and not (unacked or findings.interrupted or reversals.for_a_person or refused)
    )
    if not args.quiet:
        safe_console().print(report.table(layers, findings, passed, reversals))
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
        "findings": {
            **findings.as_dict(),
            "reversals": reversals.as_dict(),
            "passed": passed,
            "unacknowledged": unacked,
        },
        "notes": notes,
    }
    if args.json_path:
        write_json(args.json_path, record)
    if refused or (args.expect_once and not passed):
        failing.print_failing(console, findings, unacked, reversals)
        return 1
    return 0


def advance_final(progress: Progress, task: TaskID, answer: Answer) -> None:
    if answer.final:
        progress.advance(task)


def show_done(progress: Progress, task: TaskID, done: int) -> None:
    progress.update(task, completed=done)


def paid_of(answers: list[Answer], by_id: dict[str, Any], settings: Settings) -> set[str]:
    """The payments with an acknowledged paid event, whatever the server's mode."""
    acked_ids = {a.event_id for a in answers if a.kind == "valid" and a.acked}
    any_mode = dataclasses.replace(settings.policy, mode="any", connect=True)
    classified = (classify(by_id[i], any_mode) for i in acked_ids)
    return {c.payment_key for c in classified if c.paid and c.payment_key}


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
        say_error("Redis unreachable:", redact(str(exc)))
        sys.exit(3)
    except DownstreamUnusable as exc:  # the path is the user's own (--downstream-db, a setting)
        say_error("Downstream unusable:", f"{exc.path}: {exc.why}")
        sys.exit(3)


if __name__ == "__main__":
    main()
