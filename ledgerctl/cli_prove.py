"""``webhook-ledger prove-action``: the configured action through the fault matrix
(ledgerctl/prove.py) on a scratch Redis, before it ships.

It starts, on loopback only, a redis-server in a temporary folder, the sweeper and the
workers, with the action's own settings (FULFILMENT_ACTION, FULFILMENT_SQL,
FULFILMENT_EFFECT, FULFILMENT_REPLAY_SAFE, FULFILMENT_TIMEOUT) and short timers: the lease
as short as FULFILMENT_TIMEOUT allows, sweeps every 0.2 s, no Stripe API. It stops every
process it started (also on Ctrl-C or SIGTERM) and removes the folder unless ``--keep``.

With REVERSAL_ACTION set it then runs the reversal rows (ledgerctl/prove_reversal.py):
payments fulfilled, then taken back, the faults on the reversal's call, counted by a
reversal probe (``--reversals``, ``--reversals-sql``, or the built-in downstreams' own).

Exit codes: 0 every payment was fulfilled (and reversed) exactly once or left
``interrupted`` for a person (at most once); 1 a payment had two effects or two reversals,
one without its state (``fulfilled``, ``reversed``), none at all or did not settle; 2 the
actions or the options cannot be used.
"""

import json
import math
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import click
from redis import Redis

from ledger import limits
from ledger import settings as settings_module
from ledger.deliveries import Ledger
from ledger.redact import redact
from ledger.setting_fields import SettingsError, exit_with
from ledger.settings import Settings
from ledgerctl.prove import Prover
from ledgerctl.prove_probe import NOT_RUN, NoProbe, Probe, Row, probe_for, reversal_probe_for
from ledgerctl.prove_reversal import ReversalProver, ReversalRow
from ledgerctl.prove_reversal import caption as reversal_caption
from ledgerctl.scratch import Processes
from ledgerctl.terminal import rows_table, show
from workers.actions import build_action, build_reversal_action, unusable

EXIT_MORE_THAN_ONCE = 1
SCRATCH = {
    "REDIS_SENTINELS": "",
    "LEDGER_MIN_REPLICAS": "0",
    "STRIPE_MODE": "test",  # the generated events are test-mode payloads
    "CHECKOUT_LINE_ITEMS": "false",  # loopback only: nothing asks Stripe's API
    "INVOICE_LINES": "false",
    "STRIPE_API_KEY": "",
    "SWEEP_INTERVAL": "0.2",
    "QUEUED_GRACE_SECONDS": "1",
    "RETRY_BASE_SECONDS": "0.1",
    "RETRY_MAX_SECONDS": "1",
}


def scratch_env(environ: dict[str, str], redis_url: str, folder: Path) -> dict[str, str]:
    """The processes' environment: the action's settings as given, the ledger's scratch."""
    env = {k: v for k, v in environ.items() if not k.startswith(("FAULT", "PROVE_"))}
    timeout = settings_module.load(env).FULFILMENT_TIMEOUT
    lease = math.ceil(timeout + limits.LEASE_MARGIN_SECONDS) + 1
    return (
        env
        | SCRATCH
        | {
            "REDIS_URL": redis_url,
            "LEASE_SECONDS": str(lease),
            "PROVE_CALLS": str(folder / "calls"),
            "PROVE_COUNTS": str(folder / "counts"),
            "PROVE_REVERSAL_CALLS": str(folder / "reversal_calls"),
            "PROVE_REVERSAL_COUNTS": str(folder / "reversal_counts"),
        }
    )


def checked(environ: dict[str, str]) -> Settings:
    """The settings with a placeholder Redis, the action usable, else exit 2 naming why."""
    env = {**environ, **SCRATCH, "REDIS_URL": "redis://127.0.0.1:1/0"}
    try:
        s = settings_module.load(env)
    except SettingsError as exc:
        exit_with(str(exc).splitlines())
    found = unusable(s)
    if found:
        exit_with([f"{found[0]}: {found[1]}"])
    return s


@click.command("prove-action")
@click.option("--effects", help="module:function returning the effects for a payment key.")
@click.option("--effects-sql", help='"SELECT count(*) … WHERE payment_key = %(payment_key)s"')
@click.option("--effects-db", help="Where --effects-sql runs (default: the action's database).")
@click.option("--reversals", help="module:function returning the reversals for a payment key.")
@click.option("--reversals-sql", help="Like --effects-sql, counting a payment's reversals.")
@click.option("--reversals-db", help="Where --reversals-sql runs (default: REVERSAL_ACTION's).")
@click.option("--row-seconds", type=float, help="Longest wait for one fault's payment.")
@click.option("--max-seconds", default=900.0, show_default=True, help="No fault starts after this.")
@click.option("--keep", is_flag=True, help="Keep the scratch folder (logs, calls).")
@click.option("--json", "as_json", is_flag=True, help="The rows as JSON.")
def prove_action(
    effects: str | None,
    effects_sql: str | None,
    effects_db: str | None,
    reversals: str | None,
    reversals_sql: str | None,
    reversals_db: str | None,
    row_seconds: float | None,
    max_seconds: float,
    keep: bool,
    as_json: bool,
) -> None:
    """Run the configured action through the fault matrix on a scratch Redis: one row per
    fault (calls, effects, final state, verdict), then, with REVERSAL_ACTION, one per fault
    of the reversal; exit 1 unless every row passed: a payment applied or reversed more than
    once, an effect without being fulfilled, one never fulfilled, a row not run
    (docs/ACTIONS.md)."""
    environ = dict(os.environ)
    s = checked(environ)
    try:
        probe = probe_for(s, effects, effects_sql, effects_db)
        reversal_probe = None
        if s.REVERSAL_ACTION is not None or reversals or reversals_sql or reversals_db:
            reversal_probe = reversal_probe_for(
                s, reversals, reversals_sql, reversals_db, effects_sql and effects_db
            )
    except NoProbe as exc:
        exit_with([str(exc)])
    asked("effects", probe)
    if reversal_probe is not None:
        asked("reversals", reversal_probe)
    replay_safe = build_action(s).replay_safe
    reversal = build_reversal_action(s)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    folder = Path(tempfile.mkdtemp(prefix="prove-action-"))
    procs = Processes(folder)
    rows: list[Row] = []
    reversal_rows: list[ReversalRow] = []
    try:
        env = scratch_env(environ, procs.redis(), folder)
        settings = settings_module.load(env)
        per_row = row_seconds or 3 * settings.LEASE_SECONDS + 2 * settings.FULFILMENT_TIMEOUT + 30
        redis = Redis.from_url(env["REDIS_URL"], socket_timeout=30)
        prover = Prover(
            Ledger(redis, settings),
            procs,
            env,
            folder,
            probe,
            replay_safe,
            per_row,
            random.Random(),
            time.monotonic() + max_seconds,
        )
        for row in prover.rows():
            rows.append(row)
            click.echo(f"{row.fault}: {row.verdict}", err=True)
        if reversal is not None and reversal_probe is not None:
            reversing = ReversalProver(prover, reversal_probe, reversal.replay_safe)
            for reversal_row in reversing.rows():
                reversal_rows.append(reversal_row)
                click.echo(f"{reversal_row.fault}: {reversal_row.verdict}", err=True)
    finally:
        procs.stop()
        if keep:
            click.echo(f"scratch folder kept: {folder}", err=True)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    reversal_safe = reversal.replay_safe if reversal is not None else None
    report(rows, replay_safe, as_json, reversal_rows, reversal_safe)
    failed = any(not row.ok for row in rows) or any(not row.ok for row in reversal_rows)
    sys.exit(EXIT_MORE_THAN_ONCE if failed else 0)


def asked(what: str, probe: Probe) -> None:
    """The probe asked once before anything starts; whatever the user's raises, said in
    one line (exit 2)."""
    try:
        probe("pi_prove_action_check")
    except Exception as exc:
        exit_with([redact(f"{what} probe: {type(exc).__name__}: {exc}".splitlines()[0])])


def report(
    rows: list[Row],
    replay_safe: bool,
    as_json: bool,
    reversal_rows: list[ReversalRow],
    reversal_safe: bool | None,
) -> None:
    if as_json:
        found: dict[str, object] = {"replay_safe": replay_safe, "rows": [asdict(r) for r in rows]}
        if reversal_safe is not None:
            found["reversal_replay_safe"] = reversal_safe
            found["reversal_rows"] = [asdict(r) for r in reversal_rows]
        click.echo(json.dumps(found))
        return
    failed = [row for row in rows if not row.ok and row.verdict != NOT_RUN]
    caption = f"{len(rows)} fault(s); replay-safe: {'yes' if replay_safe else 'no'}; " + (
        f"FAILED: {', '.join(row.fault for row in failed)}" if failed else outcome(rows)
    )
    caption += not_run([row.fault for row in rows if row.verdict == NOT_RUN])
    columns = ("fault", "calls", "effects", "state", "verdict", "note")
    shown_rows = [asdict(row) for row in rows]
    show(rows_table("prove-action", shown_rows, columns, ("calls", "effects"), caption))
    if reversal_safe is not None:
        numbers = ("calls", "effects", "reversal_calls", "reversals")
        shown_rows = [asdict(row) for row in reversal_rows]
        said = reversal_caption(reversal_rows, reversal_safe)
        every = ("fault", *numbers, "state", "verdict", "note")
        show(rows_table("prove-action: reversal", shown_rows, every, numbers, said))


def outcome(rows: list[Row]) -> str:
    """What passing rows add up to: exactly once where every one was, else how many."""
    ran = [row for row in rows if row.verdict != NOT_RUN]
    once = sum(row.verdict == "exactly once" for row in ran)
    skipped = sum(row.verdict == "skipped" for row in ran)
    if once + skipped == len(ran):
        return "every payment exactly once"
    return f"every payment at most once: {once} exactly once, the rest interrupted for a person"


def not_run(faults: list[str]) -> str:
    """The faults --max-seconds left out, for a caption: proven nothing, failed nothing."""
    return f"; not run (--max-seconds): {', '.join(faults)}" if faults else ""


COMMANDS = (prove_action,)
