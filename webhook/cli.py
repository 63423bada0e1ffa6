"""``webhook-ledger``: the ops command line. Tables by default, ``--json`` everywhere.

Exit codes: 0 ok, 1 the thing asked about is not there or not in that state,
2 usage error, 3 Redis unreachable.
"""

import sys
import time
from pathlib import Path
from typing import Any

import click
import orjson
from redis import Redis
from redis.exceptions import RedisError
from rich.console import Console
from rich.table import Table

from webhook import readout, settings
from webhook.store import connect

EXIT_NOT_FOUND, EXIT_REDIS = 1, 3
console = Console()


class Context:
    def __init__(self) -> None:
        self.settings = settings.load()
        self._redis: Redis | None = None

    @property
    def redis(self) -> Redis:
        if self._redis is None:
            self._redis = connect(self.settings)
        return self._redis


def emit(data: Any, as_json: bool, table: Table | None = None) -> None:
    if as_json or table is None:
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        console.print(table)


def kv_table(title: str, rows: dict[str, Any]) -> Table:
    table = Table(title=title, show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in rows.items():
        table.add_row(name, str(value))
    return table


@click.group()
@click.pass_context
def main(ctx: click.Context) -> None:
    """Read and operate the Stripe webhook ledger (settings from the environment)."""
    ctx.obj = Context()


def run(fn: Any) -> Any:
    try:
        return fn()
    except RedisError as exc:
        console.print(f"[red]Redis unreachable:[/red] {exc}", style=None)
        sys.exit(EXIT_REDIS)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def summary(ctx: Context, as_json: bool) -> None:
    """Global counters, rejections by reason and payments by state."""
    data = run(lambda: readout.summary(ctx.redis, ctx.settings.QUEUE_NAME))
    rows = {name: data[name] for name in readout.COUNTERS}
    rows |= {f"rejected: {k}": v for k, v in sorted(data["rejected_by_reason"].items())}
    rows |= {f"payments: {k}": v for k, v in data["payments"].items()}
    rows |= {"attempts started": data["attempts"]["started"], "effects": data["effects"]}
    rows |= {f"fulfil latency {k} (ms)": v for k, v in data["fulfil_latency_ms"].items()}
    rows["queue length"] = data["queue_length"]
    emit(data, as_json, kv_table("Webhook ledger", rows))


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
                console.print(f"Redis at {ctx.settings.REDIS_URL} did not answer in {timeout}s")
                sys.exit(EXIT_REDIS)
            time.sleep(0.2)


@main.command()
@click.argument("payment_key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def payment(ctx: Context, payment_key: str, as_json: bool) -> None:
    """One payment: state, events, attempts, receipt."""
    record = run(lambda: readout.payment(ctx.redis, payment_key))
    if record is None:
        console.print(f"no payment {payment_key}")
        sys.exit(EXIT_NOT_FOUND)
    rows = {k: v for k, v in record.items() if k != "attempts"}
    table = kv_table(f"Payment {payment_key}", rows)
    for attempt in record["attempts"]:
        table.add_row("attempt", attempt)
    emit(record, as_json, table)


def _decide(ctx: Context, payment_key: str, decision: str, allowed: tuple[str, ...]) -> None:
    from workers.attempts import Attempts

    verdict, state = run(
        lambda: Attempts(ctx.redis, ctx.settings).decide(payment_key, decision, allowed, "cli")
    )
    if verdict != "ok":
        console.print(f"refused: {payment_key} is {state or 'unknown'}, not {' or '.join(allowed)}")
        sys.exit(EXIT_NOT_FOUND)
    console.print(f"{payment_key}: {state}")


@main.command()
@click.argument("payment_key")
@click.pass_obj
def retry(ctx: Context, payment_key: str) -> None:
    """Re-queue a failed payment with a fresh attempt budget."""
    _decide(ctx, payment_key, "retry", ("failed",))


@main.command()
@click.argument("payment_key")
@click.option("--fulfilled", "decision", flag_value="fulfilled", help="The effect happened.")
@click.option("--retry", "decision", flag_value="retry", help="Run the action again.")
@click.pass_obj
def resolve(ctx: Context, payment_key: str, decision: str | None) -> None:
    """A person's decision on an interrupted payment (checked the downstream by hand)."""
    if decision is None:
        raise click.UsageError("say --fulfilled or --retry")
    _decide(ctx, payment_key, decision, ("interrupted",))


@main.command()
@click.option("--loop", is_flag=True, help="Keep sweeping every SWEEP_INTERVAL seconds.")
@click.pass_obj
def sweep(ctx: Context, loop: bool) -> None:
    """Re-enqueue lost jobs, due retries and expired leases; surface interrupted payments."""
    from workers.attempts import Attempts
    from workers.sweeper import run_forever, sweep_once

    attempts = Attempts(ctx.redis, ctx.settings)
    if loop:
        run_forever(attempts, ctx.settings.SWEEP_INTERVAL)
    done = run(lambda: sweep_once(attempts))
    console.print(dict(done) or "nothing due")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def downstream(ctx: Context, as_json: bool) -> None:
    """The built-in SQLite downstream's own record: calls and applied effects per payment."""
    from workers.downstream import read_downstream

    spec = ctx.settings.FULFILMENT_ACTION
    if not spec.startswith("sqlite:///"):
        console.print("FULFILMENT_ACTION is not the built-in SQLite downstream")
        sys.exit(EXIT_NOT_FOUND)
    data = read_downstream(spec.removeprefix("sqlite:///"))
    table = Table(title="Downstream (SQLite)")
    for column in ("payment", "calls", "applied", "already_applied", "effects"):
        table.add_column(column, justify="right" if column != "payment" else "left")
    for key, row in data["payments"].items():
        table.add_row(
            key, *(str(row[c]) for c in ("calls", "applied", "already_applied", "effects"))
        )
    emit(data, as_json, table)


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.pass_obj
def export(ctx: Context, directory: Path) -> None:
    """Write the ledger (and the SQLite downstream's record) as an evidence bundle."""
    from webhook.bundle import export as export_bundle

    counts = run(lambda: export_bundle(ctx.redis, directory, ctx.settings.FULFILMENT_ACTION))
    console.print(f"exported to {directory}: {counts}")


@main.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def verify(directory: Path, as_json: bool) -> None:
    """Re-check a bundle's hashes and cross-file relations (no Redis needed)."""
    from webhook.bundle import verify as verify_bundle

    result = verify_bundle(directory)
    if as_json:
        emit({"passed": result.passed, "failures": result.failures}, True)
    else:
        for failure in result.failures:
            console.print(f"[red]FAIL[/red] {failure}")
        console.print(f"{result.passed} assertions passed, {len(result.failures)} failed")
    sys.exit(1 if result.failures else 0)


if __name__ == "__main__":
    main()
