"""``webhook-ledger downstream``: the built-in downstreams' own record, and ``downstream
migrate``, which makes the PostgreSQL action's table in the user's database (a worker never
runs DDL: it refuses to start while the table is missing)."""

import sys

import click
import psycopg

from ledger.downstream import open_downstream, read_downstream, using
from ledgerctl.context import EXIT_NOT_FOUND, Context, emit, json_option, run
from ledgerctl.terminal import rows_table, say
from workers.postgres_schema import TABLE, masked, migrate

EXIT_DATABASE = 3
"""The database could not be reached (as an unreachable Redis: the CLI's exit code 3)."""


@click.group(invoke_without_command=True)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1), help="Most rows.")
@json_option
@click.pass_context
def downstream(click_ctx: click.Context, limit: int, as_json: bool) -> None:
    """The built-in SQLite downstream's own record: calls and applied effects per payment
    (totals over every payment; the table lists the first --limit by payment key)."""
    if click_ctx.invoked_subcommand is not None:
        return
    ctx: Context = click_ctx.obj
    path = ctx.settings.sqlite_downstream
    if path is None:
        say("FULFILMENT_ACTION is not the built-in SQLite downstream")
        sys.exit(EXIT_NOT_FOUND)
    data = run(lambda: read_downstream(path))
    counts = ("calls", "applied", "already_applied", "effects")
    rows = [{"payment": key, **row} for key, row in data["payments"].items()]
    totals = data["totals"]
    caption = (
        f"{len(rows):,} payment(s), {totals['calls']:,} call(s), {totals['effects']:,} effect(s)"
        + (f"; first {limit} shown (--limit)" if len(rows) > limit else "")
    )
    columns = ("payment", *counts)
    emit(data, as_json, rows_table("Downstream (SQLite)", rows[:limit], columns, counts, caption))


@downstream.command("migrate")
@click.pass_obj
def migrate_command(ctx: Context) -> None:
    """Create the built-in downstream's tables when missing (idempotent): for
    postgresql://, webhook_ledger_effects in that database (docs/ACTIONS.md)."""
    action = ctx.settings.FULFILMENT_ACTION
    if action.scheme == "sqlite":
        run(lambda: made(action.target))
        say(f"{action.target}: ready")
        return
    if action.scheme != "postgresql":
        say("FULFILMENT_ACTION is neither sqlite:/// nor postgresql://: nothing to migrate")
        sys.exit(EXIT_NOT_FOUND)
    try:
        done = migrate(action.target)
    except psycopg.Error as exc:
        say(masked(f"cannot migrate: {type(exc).__name__}: {exc}".splitlines()[0], action.target))
        sys.exit(EXIT_DATABASE)
    say(f"{TABLE}: {done}")


def made(path: str) -> None:
    """The SQLite file with its tables (created when missing)."""
    with using(path):
        open_downstream(path).close()


COMMANDS = (downstream,)
