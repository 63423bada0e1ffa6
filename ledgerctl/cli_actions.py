"""The ``webhook-ledger`` commands that act: decisions, sweeping, evidence bundles."""

import sys
import time
from pathlib import Path

import click
from redis.exceptions import RedisError
from rich.text import Text

from ledger import defaults
from ledger.redact import redact
from ledgerctl.cli import EXIT_NOT_FOUND, EXIT_REDIS, Context, emit, main, run
from ledgerctl.terminal import rows_table, say


@main.command("wait-redis")
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
                say(f"Redis at {redact(ctx.settings.REDIS_URL)} did not answer in {timeout}s")
                sys.exit(EXIT_REDIS)
            time.sleep(0.2)


JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _decide(
    ctx: Context, payment_key: str, decision: str, allowed: tuple[str, ...], as_json: bool
) -> None:
    from ledger.attempts import Attempts

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


@main.command()
@click.argument("payment_key")
@JSON_OPTION
@click.pass_obj
def retry(ctx: Context, payment_key: str, as_json: bool) -> None:
    """Re-queue a failed (or held) payment with a fresh attempt budget."""
    _decide(ctx, payment_key, "retry", ("failed", "held"), as_json)


@main.command()
@click.argument("payment_key")
@click.option("--fulfilled", "decision", flag_value="fulfilled", help="The effect happened.")
@click.option("--retry", "decision", flag_value="retry", help="Run the action again.")
@JSON_OPTION
@click.pass_obj
def resolve(ctx: Context, payment_key: str, decision: str | None, as_json: bool) -> None:
    """A person's decision on an interrupted or held payment (checked by hand)."""
    if decision is None:
        raise click.UsageError("say --fulfilled or --retry")
    _decide(ctx, payment_key, decision, ("interrupted", "held"), as_json)


@main.command()
@click.option("--loop", is_flag=True, help="Keep sweeping every SWEEP_INTERVAL seconds.")
@JSON_OPTION
@click.pass_obj
def sweep(ctx: Context, loop: bool, as_json: bool) -> None:
    """Re-enqueue lost jobs, due retries and expired leases; surface interrupted payments."""
    from ledger.attempts import Attempts
    from workers.sweeper import run_forever, sweep_once

    attempts = Attempts(ctx.redis, ctx.settings)
    if loop:
        run_forever(attempts, ctx.settings.SWEEP_INTERVAL)
    done = run(lambda: sweep_once(attempts))
    emit(dict(done), True) if as_json else say(dict(done) or "nothing due")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def downstream(ctx: Context, as_json: bool) -> None:
    """The built-in SQLite downstream's own record: calls and applied effects per payment."""
    from ledger.downstream import read_downstream

    path = ctx.settings.sqlite_downstream
    if path is None:
        say("FULFILMENT_ACTION is not the built-in SQLite downstream")
        sys.exit(EXIT_NOT_FOUND)
    data = read_downstream(path)
    counts = ("calls", "applied", "already_applied", "effects")
    rows = [{"payment": key, **row} for key, row in data["payments"].items()]
    emit(data, as_json, rows_table("Downstream (SQLite)", rows, ("payment", *counts), counts))


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@JSON_OPTION
@click.pass_obj
def export(ctx: Context, directory: Path, as_json: bool) -> None:
    """Write the ledger (and the SQLite downstream's record) as an evidence bundle."""
    from ledgerctl.bundle import export as export_bundle

    counts = run(lambda: export_bundle(ctx.redis, directory, ctx.settings.sqlite_downstream))
    if as_json:
        emit({"directory": str(directory), "records": counts}, True)
    else:
        say(f"exported to {directory}: {counts}")


@main.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--max-file-mb",
    type=click.IntRange(min=1),
    default=defaults.BUNDLE_MAX_FILE_BYTES // 2**20,
    show_default=True,
    help="Largest bundle file read; a larger one fails verification.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def verify(directory: Path, max_file_mb: int, as_json: bool) -> None:
    """Re-check a bundle's hashes and cross-file relations (no Redis needed)."""
    from ledgerctl.bundle import verify as verify_bundle

    result = verify_bundle(directory, max_file_mb * 2**20)
    if as_json:
        emit({"passed": result.passed, "failures": result.failures}, True)
    else:
        for failure in result.failures:
            say(Text("FAIL", "red"), failure)
        say(f"{result.passed} assertions passed, {len(result.failures)} failed")
    sys.exit(1 if result.failures else 0)
