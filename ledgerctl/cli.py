"""``webhook-ledger``: the ops command line. Tables for people by default; ``--json`` prints
the very objects the ops API answers (ledger/read/).

Exit codes: 0 ok, 1 the thing asked about is not there or not in that state,
2 usage error, 3 Redis unreachable.
"""

import sys

import click

from ledger.read import events as read_events
from ledger.read import payments as read_payments
from ledger.read import rejections as read_rejections
from ledger.read import secrets as read_secrets
from ledger.read import stats
from ledger.read.events import EventList
from ledger.read.payments import PaymentList
from ledger.read.rejections import RejectionList
from ledger.subscriptions import snapshot_types
from ledgerctl import (
    cli_actions,
    cli_downstream,
    cli_endpoint,
    cli_fulfilment,
    cli_landing,
    cli_prove,
    cli_reconcile,
    render,
)
from ledgerctl.context import EXIT_NOT_FOUND, Context, emit, json_option, run
from ledgerctl.terminal import say

NO_SECRETS_HERE = (
    "note: STRIPE_WEBHOOK_SECRET is not set in this terminal, so 'configured' says what this "
    "terminal has, not the service: export it (and STRIPE_WEBHOOK_SECRET_LABELS) as the "
    "service has them, or read the dashboard"
)

limit_option = click.option(
    "--limit", default=20, show_default=True, type=click.IntRange(1, 500), help="Most rows."
)
offset_option = click.option(
    "--offset", default=0, type=click.IntRange(0), help="Rows to skip (newest first)."
)


@click.group()
@click.pass_context
def main(ctx: click.Context) -> None:
    """Read and operate the Stripe webhook ledger (settings from the environment)."""
    ctx.obj = Context()


@main.command()
@json_option
@click.pass_obj
def summary(ctx: Context, as_json: bool) -> None:
    """Counters, payments by state, fulfil latency (last hour), queue and workers."""
    data = run(lambda: stats.summary(ctx.redis, ctx.settings))
    emit(data, as_json, *render.summary(data))


@main.command()
@click.option("--type", "event_type", help="Only events of this type.")
@limit_option
@offset_option
@json_option
@click.pass_obj
def events(ctx: Context, event_type: str | None, limit: int, offset: int, as_json: bool) -> None:
    """Latest events with their delivery counts."""
    rows = run(lambda: read_events.events(ctx.redis, event_type, None, None, offset, limit))
    page = EventList(events=rows, offset=offset, limit=limit)
    emit(page, as_json, render.events(page))


@main.command()
@click.argument("event_id")
@click.option("--payload", is_flag=True, help="Include the stored payload.")
@json_option
@click.pass_obj
def event(ctx: Context, event_id: str, payload: bool, as_json: bool) -> None:
    """One event: deliveries, sources, payment, hash (and payload)."""
    record = run(lambda: read_events.event(ctx.redis, event_id, with_payload=payload))
    if record is None:
        say("no event", event_id)
        sys.exit(EXIT_NOT_FOUND)
    emit(record, as_json, *render.event(record))


@main.command()
@click.option(
    "--state",
    type=click.Choice(read_payments.STATE_FILTERS),
    help="Only this state; 'attention': what needs a person.",
)
@limit_option
@offset_option
@json_option
@click.pass_obj
def payments(ctx: Context, state: str | None, limit: int, offset: int, as_json: bool) -> None:
    """Payments, most recent state change first."""
    stuck = ctx.settings.STUCK_QUEUED_SECONDS
    rows = run(lambda: read_payments.payments(ctx.redis, state, offset, limit, stuck))
    page = PaymentList(payments=rows, state=state, offset=offset, limit=limit)
    emit(page, as_json, render.payments(page))


@main.command()
@click.argument("payment_key")
@json_option
@click.pass_obj
def payment(ctx: Context, payment_key: str, as_json: bool) -> None:
    """One payment's timeline: state, amount, events, attempts, the downstream's record."""
    downstream = ctx.settings.sqlite_downstream
    record = run(lambda: read_payments.payment(ctx.redis, payment_key, downstream))
    if record is None:
        say("no payment", payment_key)
        sys.exit(EXIT_NOT_FOUND)
    emit(record, as_json, *render.payment(record, ctx.settings.REVERSAL_ACTION is not None))


@main.command()
@limit_option
@json_option
@click.pass_obj
def rejections(ctx: Context, limit: int, as_json: bool) -> None:
    """Latest rejections (reason, status, size, hash, remote address; never the body)."""
    page = RejectionList(
        rejections=run(lambda: read_rejections.rejections(ctx.redis, limit)), limit=limit
    )
    emit(page, as_json, render.rejections(page))


@main.command()
@json_option
@click.pass_obj
def secrets(ctx: Context, as_json: bool) -> None:
    """Deliveries and last use per secret label, and which secrets can be retired."""
    s = ctx.settings
    found = run(lambda: read_secrets.usage(ctx.redis, s.secret_labels, s.SECRET_RETIRE_AFTER_DAYS))
    emit(found, as_json, render.secrets(found))
    if (
        not s.STRIPE_WEBHOOK_SECRET
    ):  # e.g. a new terminal beside scripts/run.sh, whose secret is in var/dev.env
        click.echo(NO_SECRETS_HERE, err=True)


@main.command("event-types")
@click.option("--csv", "as_csv", is_flag=True, help="One line, comma-separated.")
@click.pass_obj
def event_types(ctx: Context, as_csv: bool) -> None:
    """The event types to select on the Stripe endpoint (ledger/events.py's table; the refund
    and dispute types too with REVERSAL_ACTION set)."""
    names = snapshot_types(ctx.settings.reversal_on)
    click.echo(",".join(names) if as_csv else "\n".join(names))


for command in (
    *cli_actions.COMMANDS,
    *cli_downstream.COMMANDS,
    *cli_endpoint.COMMANDS,
    *cli_reconcile.COMMANDS,
    *cli_fulfilment.COMMANDS,
    *cli_landing.COMMANDS,
    *cli_prove.COMMANDS,
):
    main.add_command(command)

if __name__ == "__main__":
    main()
