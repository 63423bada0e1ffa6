"""``webhook-ledger``: the ops command line. Tables by default, ``--json`` everywhere.

Exit codes: 0 ok, 1 the thing asked about is not there or not in that state,
2 usage error, 3 Redis unreachable.
"""

import sys

import click

from ledger import queries, secret_usage
from ledgerctl import cli_actions, cli_reconcile
from ledgerctl.context import EXIT_NOT_FOUND, Context, emit, json_option, run
from ledgerctl.terminal import kv_table, literal, rows_table, say, utc


@click.group()
@click.pass_context
def main(ctx: click.Context) -> None:
    """Read and operate the Stripe webhook ledger (settings from the environment)."""
    ctx.obj = Context()


@main.command()
@json_option
@click.pass_obj
def summary(ctx: Context, as_json: bool) -> None:
    """Global counters, rejections by reason and payments by state."""
    data = run(lambda: queries.summary(ctx.redis, ctx.settings.QUEUE_NAME))
    rows = {name: data[name] for name in queries.COUNTERS}
    rows |= {f"rejected: {k}": v for k, v in sorted(data["rejected_by_reason"].items())}
    rows |= {f"payments: {k}": v for k, v in data["payments"].items()}
    rows |= {"attempts started": data["attempts"]["started"], "effects": data["effects"]}
    rows |= {f"fulfil latency {k} (ms)": v for k, v in data["fulfil_latency_ms"].items()}
    rows["queue length"] = data["queue_length"]
    emit(data, as_json, kv_table("Webhook ledger", rows))


@main.command()
@click.option("--type", "event_type", help="Only events of this type.")
@click.option("--limit", default=20, show_default=True)
@click.option("--offset", default=0)
@json_option
@click.pass_obj
def events(ctx: Context, event_type: str | None, limit: int, offset: int, as_json: bool) -> None:
    """Latest events with their delivery counts."""
    rows = run(lambda: queries.events(ctx.redis, event_type, None, None, offset, limit))
    emit(
        rows,
        as_json,
        rows_table("Events", rows, ("id", "type", "n", "origin", "pk", "first", "last")),
    )


@main.command()
@click.argument("event_id")
@click.option("--payload", is_flag=True, help="Include the stored payload.")
@json_option
@click.pass_obj
def event(ctx: Context, event_id: str, payload: bool, as_json: bool) -> None:
    """One event: deliveries, sources, payment, hash (and payload)."""
    record = run(lambda: queries.event(ctx.redis, event_id, with_payload=payload))
    if record is None:
        say("no event", event_id)
        sys.exit(EXIT_NOT_FOUND)
    emit(record, as_json, kv_table(f"Event {event_id}", record))


@main.command()
@click.option(
    "--state",
    type=click.Choice(queries.STATE_FILTERS),
    help="Only this state; 'attention': what needs a person.",
)
@click.option("--limit", default=20, show_default=True)
@click.option("--offset", default=0)
@json_option
@click.pass_obj
def payments(ctx: Context, state: str | None, limit: int, offset: int, as_json: bool) -> None:
    """Payments, most recent state change first."""
    stuck = ctx.settings.STUCK_QUEUED_SECONDS
    rows = run(lambda: queries.payments(ctx.redis, state, offset, limit, stuck))
    columns: tuple[str, ...] = (
        "key",
        "state",
        "deliveries",
        "attempts_started",
        "latency_ms",
        "last_error",
    )
    if state == queries.ATTENTION:
        columns = ("key", "state", "attempts_started", "hold_reason", "last_error")
    emit(rows, as_json, rows_table("Payments", rows, columns))


@main.command()
@click.argument("payment_key")
@json_option
@click.pass_obj
def payment(ctx: Context, payment_key: str, as_json: bool) -> None:
    """One payment: state, events, attempts, receipt."""
    record = run(lambda: queries.payment(ctx.redis, payment_key))
    if record is None:
        say("no payment", payment_key)
        sys.exit(EXIT_NOT_FOUND)
    rows = {k: v for k, v in record.items() if k != "attempts"}
    table = kv_table(f"Payment {payment_key}", rows)
    for attempt in record["attempts"]:
        table.add_row("attempt", literal(attempt))
    emit(record, as_json, table)


@main.command()
@click.option("--limit", default=20, show_default=True)
@json_option
@click.pass_obj
def rejections(ctx: Context, limit: int, as_json: bool) -> None:
    """Recent rejections (reason, status, size, hash, remote address; never the body)."""
    rows = run(lambda: queries.rejections(ctx.redis, limit))
    columns = ("at", "reason", "status", "size", "remote", "sha256")
    emit(rows, as_json, rows_table("Rejections", rows, columns))


@main.command()
@json_option
@click.pass_obj
def secrets(ctx: Context, as_json: bool) -> None:
    """Deliveries and last use per secret label, and which secrets can be retired."""
    s = ctx.settings
    rows = run(lambda: secret_usage.usage(ctx.redis, s.secret_labels, s.SECRET_RETIRE_AFTER_DAYS))
    shown = [
        {**r, "last_seen": utc(r["last_seen"]), "configured": str(r["configured"])} for r in rows
    ]
    columns = ("shown_as", "configured", "deliveries", "last_seen", "status")
    title = f"Secrets (safe to retire after {s.SECRET_RETIRE_AFTER_DAYS} days unused)"
    emit(rows, as_json, rows_table(title, shown, columns))


for command in (*cli_actions.COMMANDS, *cli_reconcile.COMMANDS):
    main.add_command(command)

if __name__ == "__main__":
    main()
