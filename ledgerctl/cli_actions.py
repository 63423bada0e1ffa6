"""The ``webhook-ledger`` commands that act: decisions, sweeping, evidence bundles (added
to the group by ledgerctl/cli.py)."""

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import click
from redis import Redis
from redis.exceptions import AuthenticationError, RedisError, ResponseError
from rich.text import Text

from ledger import keys, limits
from ledger.attempts import Attempts
from ledger.connection import close, connect, describe
from ledger.decisions import decide
from ledger.read.base import Problem
from ledger.read.payment_reasons import TAKEN_BACK
from ledger.read.reversal import leg_of, taken_back_now
from ledger.redact import redact
from ledger.replication import online_replicas
from ledger.stored import decode_hash
from ledgerctl.bundle import export as export_bundle
from ledgerctl.bundle import verify as verify_bundle
from ledgerctl.cli_bulk import bulk_options, run_bulk
from ledgerctl.context import EXIT_NOT_FOUND, EXIT_REDIS, Context, emit, json_option, run
from ledgerctl.terminal import iso, say
from workers.supervise import supervise
from workers.sweeper import run_forever, sweep_once


def _note(text: str) -> None:
    """One line on stderr, never wrapped (a process manager's log shows it)."""
    click.echo(text, err=True)


PROBE_SECONDS = 1.0
"""The longest one PING of wait-redis waits for its answer."""


@click.command("wait-redis")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait.")
@click.pass_obj
def wait_redis(ctx: Context, timeout: float) -> None:
    """Wait until Redis answers (the Procfile's processes start in any order), and with
    LEDGER_MIN_REPLICAS until that many replicas are online. Gives up at once when Redis
    answers with a refusal (password, database), else after --timeout."""
    where = describe(ctx.settings)
    _note(f"waiting for Redis at {where} (up to {timeout:g} s)")
    started = time.monotonic()
    # each PING gives up within a second and is not retried by redis-py: a Redis that
    # accepts connections but never answers (stopped, swapping) ends the wait on time
    probe = connect(
        dataclasses.replace(
            ctx.settings,
            REDIS_SOCKET_TIMEOUT=min(ctx.settings.REDIS_SOCKET_TIMEOUT, PROBE_SECONDS),
            REDIS_RETRIES=0,
        )
    )
    while True:
        try:
            probe.ping()
        except (AuthenticationError, ResponseError) as exc:  # it answered: waiting cannot help
            why = redact(str(exc))
            _note(f"gave up: Redis at {where} refused: {why} (check REDIS_URL, REDIS_PASSWORD)")
            sys.exit(EXIT_REDIS)
        except RedisError as exc:
            if time.monotonic() - started > timeout:
                why = redact(str(exc)) or type(exc).__name__
                _note(f"gave up after {timeout:g} s: Redis at {where} did not answer: {why}")
                sys.exit(EXIT_REDIS)
            time.sleep(0.2)
        else:
            _note(f"Redis at {where} answered after {time.monotonic() - started:.1f} s")
            break
    if ctx.settings.LEDGER_MIN_REPLICAS:
        _wait_replicas(ctx, probe, started, timeout, where)
    close(probe)


def _wait_replicas(ctx: Context, probe: Redis, started: float, timeout: float, where: str) -> None:
    """With LEDGER_MIN_REPLICAS, the primary refuses writes until that many replicas are
    online: wait for them too, so the processes do not start into NOREPLICAS errors."""
    wanted = ctx.settings.LEDGER_MIN_REPLICAS
    _note(f"waiting for {wanted} replica(s) of {where} to be online (LEDGER_MIN_REPLICAS)")
    online = 0
    while True:
        try:
            online = online_replicas(probe.info("replication"))
        except RedisError:
            pass  # a failover under way: ask again
        if online >= wanted:
            _note(f"{online} replica(s) online after {time.monotonic() - started:.1f} s")
            return
        if time.monotonic() - started > timeout:
            _note(f"gave up after {timeout:g} s: {online} of {wanted} replica(s) online")
            sys.exit(EXIT_REDIS)
        time.sleep(0.2)


def _decide(ctx: Context, payment_key: str, action: str, decision: str, as_json: bool) -> None:
    """Apply the decision; print the answer the ops API would give (exit 1 when refused)."""
    attempts = Attempts(ctx.redis, ctx.settings)
    answer = run(lambda: decide(attempts, payment_key, action, decision, "cli"))
    if as_json:
        emit(answer, True)
    elif isinstance(answer, Problem) and answer.retry_after is not None:
        wait_s = max(0.0, answer.retry_after.timestamp() - time.time())
        when = f"{iso(answer.retry_after)} (in {wait_s:.0f} s)"
        say(f"refused: the worker process of its last call may still be in it; try after {when}")
    elif isinstance(answer, Problem) and answer.error == "not_found":
        say("refused: no payment", payment_key)
    elif isinstance(answer, Problem) and answer.error in ("grant_by_hand", "not_taken_back"):
        say("refused:", payment_key, answer.message)
    elif isinstance(answer, Problem):
        say("refused:", payment_key, f"is {answer.state}, not {' or '.join(answer.allowed or [])}")
    else:
        say(f"{payment_key}: {answer.state}{_then(ctx, payment_key, answer.state)}")
    sys.exit(EXIT_NOT_FOUND if isinstance(answer, Problem) else 0)


def _then(ctx: Context, payment_key: str, state: str) -> str:
    """What a re-queued fulfilment Stripe took back meanwhile does next (not fulfilled)."""
    if state != "queued":
        return ""
    f = decode_hash(run(lambda: ctx.redis.hgetall(keys.payment(payment_key))))
    taken_back = taken_back_now(f)
    if not f or leg_of(f) != "fulfil" or taken_back not in TAKEN_BACK:
        return ""
    return (
        f" ({TAKEN_BACK[taken_back]} since: its next attempt does not fulfil it; it ends "
        "refunded_unfulfilled, settled or held, docs/REVERSAL.md)"
    )


@click.command()
@click.argument("payment_key", required=False)
@bulk_options
@json_option
@click.pass_obj
def retry(ctx: Context, payment_key: str | None, as_json: bool, **filters: Any) -> None:
    """Re-queue a failed (or held) payment with a fresh attempt budget; with --state, every
    payment in that state (--since, --error narrow it; --dry-run first)."""
    if payment_key is None:
        run_bulk(ctx, "retry", as_json, **filters)
    else:
        _decide(ctx, payment_key, "retry", "retry", as_json)


@click.command()
@click.argument("payment_key", required=False)
@click.option("--fulfilled", "decision", flag_value="fulfilled", help="The effect happened.")
@click.option("--retry", "decision", flag_value="retry", help="Run the action again.")
@click.option(
    "--not-applied",
    "decision",
    flag_value="not_applied",
    help="It had no effect, and it is held after it was taken back: refunded_unfulfilled.",
)
@bulk_options
@json_option
@click.pass_obj
def resolve(
    ctx: Context, payment_key: str | None, decision: str | None, as_json: bool, **filters: Any
) -> None:
    """A person's decision on an interrupted or held payment (checked by hand); with
    --retry --state interrupted, on every one you checked (--dry-run lists them first).
    --not-applied: one held after a refund in full or a dispute lost, whose downstream shows
    no effect, ends refunded_unfulfilled (no reversal)."""
    if decision is None:
        raise click.UsageError("say --fulfilled, --retry or --not-applied")
    if payment_key is None:
        if decision != "retry":
            raise click.UsageError("many payments at once: only --retry (check each one first)")
        run_bulk(ctx, "resolve", as_json, **filters)
    else:
        _decide(ctx, payment_key, "resolve", decision, as_json)


@click.command()
@click.option("--loop", is_flag=True, help="Keep sweeping every SWEEP_INTERVAL seconds.")
@json_option
@click.pass_obj
def sweep(ctx: Context, loop: bool, as_json: bool) -> None:
    """Re-enqueue lost jobs, due retries and expired leases; surface interrupted payments."""
    if loop:  # in a child process, started again if it ends (workers/supervise.py)
        s = ctx.settings  # checked once, here: a wrong setting is not worth a restart
        sys.exit(
            supervise("sweeper", lambda: run_forever(Attempts(ctx.redis, s), s.SWEEP_INTERVAL))
        )
    attempts = Attempts(ctx.redis, ctx.settings)
    done = dict(run(lambda: sweep_once(attempts)))
    if as_json:
        emit(done, True)
    else:
        say(
            ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in sorted(done.items()))
            or "nothing due"
        )


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@json_option
@click.pass_obj
def export(ctx: Context, directory: Path, as_json: bool) -> None:
    """Write the ledger (and the SQLite downstream's record) as an evidence bundle."""
    try:
        counts = run(lambda: export_bundle(ctx.redis, directory, ctx.settings.sqlite_downstream))
    except OSError as exc:  # a parent that is a file, no permission, a full disk
        where = exc.filename or directory
        raise click.BadParameter(
            f"cannot write {where}: {exc.strerror}", param_hint="'DIRECTORY'"
        ) from exc
    if as_json:
        emit({"directory": str(directory), "records": counts}, True)
        return
    say(f"exported to {directory}:")
    for name, n in counts.items():
        say(f"  {name}: {n:,} record{'' if n == 1 else 's'}")
    say(f"check it any time with: webhook-ledger verify {directory}")


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--max-file-mb",
    type=click.IntRange(min=1),
    default=limits.BUNDLE_MAX_FILE_BYTES // 2**20,
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


COMMANDS = (wait_redis, retry, resolve, sweep, export, verify)
