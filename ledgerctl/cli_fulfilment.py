"""``webhook-ledger fulfilment pause|resume|status``: stop and restart every worker's
downstream calls at once (intake and the ledger go on; jobs wait in the ledger)."""

import getpass

import click

from ledger.gate import Gate
from ledger.read import fulfilment as read_fulfilment
from ledgerctl import render_gate
from ledgerctl.context import Context, emit, json_option, run
from ledgerctl.terminal import say


def who() -> str:
    """The CLI's signature on a pause or resume: the login name of this terminal."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


@click.group()
def fulfilment() -> None:
    """Pause, resume or show downstream calls (and the circuit breaker) for every worker."""


@fulfilment.command()
@click.option("--reason", default="", help="Why (shown with the pause).")
@json_option
@click.pass_obj
def pause(ctx: Context, reason: str, as_json: bool) -> None:
    """No worker calls the downstream until resumed; payments wait, nothing fails."""
    done = run(lambda: Gate(ctx.redis, ctx.settings).pause(who(), reason[:200]))
    if not done and not as_json:
        say("already paused (its first pause's time, author and reason are kept)")
    _show(ctx, as_json)


@fulfilment.command()
@json_option
@click.pass_obj
def resume(ctx: Context, as_json: bool) -> None:
    """Calls resume; the sweeper re-queues the waiting payments at once."""
    if not run(lambda: Gate(ctx.redis, ctx.settings).resume(who())) and not as_json:
        say("was not paused")
    _show(ctx, as_json)


@fulfilment.command()
@json_option
@click.pass_obj
def status(ctx: Context, as_json: bool) -> None:
    """Pause, circuit breaker, call rate and the payments waiting because of them."""
    _show(ctx, as_json)


def _show(ctx: Context, as_json: bool) -> None:
    now = run(lambda: read_fulfilment.status(ctx.redis, ctx.settings))
    emit(now, as_json, render_gate.fulfilment(now))


COMMANDS = (fulfilment,)
