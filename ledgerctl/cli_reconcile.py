"""``webhook-ledger reconcile``: what Stripe's Events API has that the ledger lacks."""

import sys

import click
from rich.text import Text

from ledger.deliveries import Ledger
from ledger.reconcile import Run, reconcile, view, window_s
from ledgerctl.context import EXIT_NOT_FOUND, EXIT_STRIPE, Context, emit, json_option, run
from ledgerctl.terminal import console, kv_table, rows_table, say, utc


@click.command("reconcile")
@click.option(
    "--since",
    metavar="DURATION",
    help="How far back: 30m, 12h, 3d, 2w (default: EVENT_RETENTION_DAYS, at most 30 days).",
)
@click.option("--apply", is_flag=True, help="Record the missing events (source api).")
@click.option(
    "--all",
    "every_event",
    is_flag=True,
    help="List every event, not only those Stripe did not deliver (e.g. after restoring "
    "Redis from a backup).",
)
@json_option
@click.pass_obj
def reconcile_command(
    ctx: Context, since: str | None, apply: bool, every_event: bool, as_json: bool
) -> None:
    """Compare the ledger with Stripe's Events API; a dry run unless --apply."""
    if not ctx.settings.STRIPE_API_KEY:
        raise click.UsageError("set STRIPE_API_KEY (a restricted key that can read events)")
    try:
        window = window_s(ctx.settings.EVENT_RETENTION_DAYS, since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from exc
    ledger = Ledger(ctx.redis, ctx.settings)
    result: Run = run(lambda: reconcile(ledger, window, apply, every_event))
    emit(view(result.as_dict()), True) if as_json else show_run(result)
    if result.error:
        sys.exit(EXIT_STRIPE)
    sys.exit(EXIT_NOT_FOUND if result.missing and not apply else 0)


def show_run(result: Run) -> None:
    """The run as tables: figures, missing by type, then each missing event."""
    rows: dict[str, object] = {
        "events created since": utc(result.since * 1000),
        "listed": f"{result.listed} ({'all' if result.every_event else 'not delivered'})",
        "missing from the ledger": len(result.missing),
    }
    rows |= {f"missing: {t}": n for t, n in sorted(result.by_type.items())}
    if result.applied:
        rows |= {"recorded (source api)": result.recorded, "arrived meanwhile": result.arrived}
        rows["fulfilment jobs"] = result.enqueued
    if result.unreadable:
        rows["not Stripe events (skipped)"] = result.unreadable
    mode = "applied" if result.applied else "dry run"
    console.print(kv_table(f"Reconcile with Stripe's Events API ({mode})", rows))
    if result.missing:
        columns = ("id", "type", "payment", "paid", "created")
        missing = [{**m, "created": _utc_s(m["created"])} for m in result.missing]
        console.print(rows_table("Missing from the ledger", missing, columns))
    if result.error:
        say(Text("Stripe's API:", "red"), result.error)
    elif result.missing and not result.applied:
        say("dry run: nothing recorded; --apply records them")


def _utc_s(created: object) -> object:
    """Stripe's ``created`` (epoch seconds) as UTC; anything else as it came."""
    return utc(created * 1000) if isinstance(created, int) else created


COMMANDS = (reconcile_command,)
