"""``webhook-ledger downstream``: the built-in downstreams' own record, and ``downstream
migrate``, which makes the PostgreSQL action's table in the user's database (a worker never
runs DDL: it refuses to start while the table is missing)."""

import sys

import click
import psycopg

from ledger.downstream import DownstreamUnusable, open_downstream, read_downstream, using
from ledger.redact import downstream as shown_downstream
from ledger.setting_fields import field_named
from ledger.setting_urls import ActionSpec
from ledger.settings import Settings
from ledgerctl.context import EXIT_NOT_FOUND, Context, emit, json_option, run
from ledgerctl.terminal import rows_table, say
from workers.postgres_schema import TABLE, NotUtf8, masked, migrate

NOT_A_DATABASE = "neither sqlite:/// nor postgresql://"
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
    """Create the tables of each built-in downstream the settings name, when missing
    (idempotent): FULFILMENT_ACTION's and REVERSAL_ACTION's, once for a database both name;
    for postgresql://, webhook_ledger_effects in that database (docs/ACTIONS.md). One line
    each, naming its settings; exit 1 when none is sqlite:/// or postgresql://, 3 when one
    could not be migrated (the others are)."""
    s = ctx.settings
    default = field_named(Settings, "FULFILMENT_ACTION").default
    databases: dict[ActionSpec, list[str]] = {}
    for setting, action in (
        ("FULFILMENT_ACTION", s.FULFILMENT_ACTION),
        ("REVERSAL_ACTION", s.REVERSAL_ACTION),
    ):
        if action is not None and action.scheme in ("sqlite", "postgresql"):
            databases.setdefault(action, []).append(setting)
        elif action is not None:
            say(f"{setting} {shown_downstream(str(action))}: {NOT_A_DATABASE}, nothing to migrate")
    if not databases:
        sys.exit(EXIT_NOT_FOUND)
    failed = False
    for action, settings in databases.items():
        named = f"{' and '.join(settings)} {shown_downstream(str(action))}"
        named += " (the default)" if action == default else ""
        try:
            done = (
                made(action.target)
                if action.scheme == "sqlite"
                else f"{TABLE} {migrate(action.target)}"
            )
        except DownstreamUnusable as exc:
            done, failed = f"cannot migrate: {exc.why}", True
        except NotUtf8 as exc:
            done, failed = f"cannot migrate: {exc}", True
        except psycopg.Error as exc:
            why = f"cannot migrate: {type(exc).__name__}: {exc}".splitlines()[0]
            done, failed = masked(why, action.target), True
        say(f"{named}: {done}")
    if failed:
        sys.exit(EXIT_DATABASE)


def made(path: str) -> str:
    """The SQLite file with its tables (created when missing)."""
    with using(path):
        open_downstream(path).close()
    return "ready"


COMMANDS = (downstream,)
