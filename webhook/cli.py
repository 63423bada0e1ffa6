"""``webhook-ledger``: the ops command line. Tables by default, ``--json`` everywhere.

Exit codes: 0 ok, 1 the thing asked about is not there or not in that state,
2 usage error, 3 Redis unreachable.
"""

import sys
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


if __name__ == "__main__":
    main()
