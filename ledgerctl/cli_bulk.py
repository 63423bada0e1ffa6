"""``webhook-ledger retry --state failed`` and ``resolve --retry --state interrupted``: one
decision on every payment a filter selects (ledger/decisions.py), with --dry-run first."""

import sys
from collections.abc import Callable
from typing import Any

import click

from ledger.attempts import Attempts
from ledger.decisions import BadFilter, decide_bulk
from ledger.read.decisions import BulkDecision
from ledgerctl.context import EXIT_NOT_FOUND, Context, emit, run
from ledgerctl.terminal import say


def bulk_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        (
            click.option("--state", help="Every payment in this state (no PAYMENT_KEY)."),
            click.option("--since", default="", help="Only those that entered it within (2h)."),
            click.option("--error", default="", help="Only those whose last error contains."),
            click.option("--dry-run", is_flag=True, help="Only count and list them."),
        )
    ):
        command = option(command)
    return command


def run_bulk(
    ctx: Context,
    action: str,
    as_json: bool,
    state: str | None,
    since: str,
    error: str,
    dry_run: bool,
) -> None:
    """Print how many matched and how many this run re-queued (exit 1: none matched)."""
    if state is None:
        raise click.UsageError("give a PAYMENT_KEY, or --state for every payment in a state")
    attempts = Attempts(ctx.redis, ctx.settings)
    try:
        done = run(lambda: decide_bulk(attempts, action, state, since, error, dry_run, "cli-bulk"))
    except BadFilter as exc:
        raise click.UsageError(str(exc)) from exc
    if as_json:
        emit(done, True)
    else:
        _say(done)
    sys.exit(EXIT_NOT_FOUND if not done.matched else 0)


def _say(done: BulkDecision) -> None:
    for pk in done.payment_keys:
        say(f"  {pk}")
    more = done.matched - len(done.payment_keys) if done.dry_run else 0
    if more > 0:
        say(f"  ... and {more:,} more")
    what = f"{done.matched:,} {done.state} payment(s) match"
    say(
        f"{what}; dry run, nothing changed"
        if done.dry_run
        else f"{what}; re-queued {done.requeued:,}"
    )
    if done.by_hand:
        say(
            f"{done.by_hand:,} more held only for a person to act by hand (a retry runs "
            "nothing): webhook-ledger payment PAYMENT_KEY says how, then resolve each"
        )
    if done.still_running:
        say(f"{done.still_running:,} left alone: their last call may still be running; try later")
