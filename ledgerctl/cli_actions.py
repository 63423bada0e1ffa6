"""The ``webhook-ledger`` commands that act: decisions, sweeping, evidence bundles (added
to the group by ledgerctl/cli.py)."""

import sys
import time
from pathlib import Path

import click
from redis.exceptions import RedisError
from rich.text import Text

from ledger import defaults
from ledger.attempts import DECISIONS, Attempts
from ledger.connection import describe
from ledger.downstream import read_downstream
from ledgerctl.bundle import export as export_bundle
from ledgerctl.bundle import verify as verify_bundle
from ledgerctl.context import EXIT_NOT_FOUND, EXIT_REDIS, Context, emit, json_option, run
from ledgerctl.terminal import rows_table, say
from workers.sweeper import run_forever, sweep_once


@click.command("wait-redis")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait.")
@click.pass_obj
def wait_redis(ctx: Context, timeout: float) -> None:
    """Wait until Redis answers (used by the Procfile so processes start in any order)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            ctx.redis.ping()
            return
        except RedisError:
            if time.monotonic() > deadline:
                say(f"Redis at {describe(ctx.settings)} did not answer in {timeout}s")
                sys.exit(EXIT_REDIS)
            time.sleep(0.2)


def _decide(
    ctx: Context, payment_key: str, decision: str, allowed: tuple[str, ...], as_json: bool
) -> None:
    verdict, state = run(
        lambda: Attempts(ctx.redis, ctx.settings).decide(payment_key, decision, allowed, "cli")
    )
    if as_json:
        emit({"payment": payment_key, "verdict": verdict, "state": state}, True)
    elif verdict == "wait":
        wait_s = max(0.0, int(state) / 1000 - time.time())
        say(f"refused: its last call may still be running; try again in {wait_s:.0f} s")
    elif verdict != "ok":
        say("refused:", payment_key, f"is {state or 'unknown'}, not {' or '.join(allowed)}")
    else:
        say(f"{payment_key}: {state}")
    sys.exit(0 if verdict == "ok" else EXIT_NOT_FOUND)


@click.command()
@click.argument("payment_key")
@json_option
@click.pass_obj
def retry(ctx: Context, payment_key: str, as_json: bool) -> None:
    """Re-queue a failed (or held) payment with a fresh attempt budget."""
    _decide(ctx, payment_key, "retry", DECISIONS["retry"][1], as_json)


@click.command()
@click.argument("payment_key")
@click.option("--fulfilled", "decision", flag_value="fulfilled", help="The effect happened.")
@click.option("--retry", "decision", flag_value="retry", help="Run the action again.")
@json_option
@click.pass_obj
def resolve(ctx: Context, payment_key: str, decision: str | None, as_json: bool) -> None:
    """A person's decision on an interrupted or held payment (checked by hand)."""
    if decision is None:
        raise click.UsageError("say --fulfilled or --retry")
    _decide(ctx, payment_key, decision, DECISIONS["resolve"][1], as_json)


@click.command()
@click.option("--loop", is_flag=True, help="Keep sweeping every SWEEP_INTERVAL seconds.")
@json_option
@click.pass_obj
def sweep(ctx: Context, loop: bool, as_json: bool) -> None:
    """Re-enqueue lost jobs, due retries and expired leases; surface interrupted payments."""
    attempts = Attempts(ctx.redis, ctx.settings)
    if loop:
        run_forever(attempts, ctx.settings.SWEEP_INTERVAL)
    done = run(lambda: sweep_once(attempts))
    emit(dict(done), True) if as_json else say(dict(done) or "nothing due")


@click.command()
@json_option
@click.pass_obj
def downstream(ctx: Context, as_json: bool) -> None:
    """The built-in SQLite downstream's own record: calls and applied effects per payment."""
    path = ctx.settings.sqlite_downstream
    if path is None:
        say("FULFILMENT_ACTION is not the built-in SQLite downstream")
        sys.exit(EXIT_NOT_FOUND)
    data = read_downstream(path)
    counts = ("calls", "applied", "already_applied", "effects")
    rows = [{"payment": key, **row} for key, row in data["payments"].items()]
    emit(data, as_json, rows_table("Downstream (SQLite)", rows, ("payment", *counts), counts))


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@json_option
@click.pass_obj
def export(ctx: Context, directory: Path, as_json: bool) -> None:
    """Write the ledger (and the SQLite downstream's record) as an evidence bundle."""
    counts = run(lambda: export_bundle(ctx.redis, directory, ctx.settings.sqlite_downstream))
    if as_json:
        emit({"directory": str(directory), "records": counts}, True)
    else:
        say(f"exported to {directory}: {counts}")


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--max-file-mb",
    type=click.IntRange(min=1),
    default=defaults.BUNDLE_MAX_FILE_BYTES // 2**20,
    show_default=True,
    help="Largest bundle file read; a larger one fails verification.",
)
@json_option
def verify(directory: Path, max_file_mb: int, as_json: bool) -> None:
    """Re-check a bundle's hashes and cross-file relations (no Redis needed)."""
    result = verify_bundle(directory, max_file_mb * 2**20)
    if as_json:
        emit({"passed": result.passed, "failures": result.failures}, True)
    else:
        for failure in result.failures:
            say(Text("FAIL", "red"), failure)
        say(f"{result.passed} assertions passed, {len(result.failures)} failed")
    sys.exit(1 if result.failures else 0)


COMMANDS = (wait_redis, retry, resolve, sweep, downstream, export, verify)
