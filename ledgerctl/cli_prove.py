"""``webhook-ledger prove-action``: the configured action through the fault matrix
(ledgerctl/prove.py) on a scratch Redis, before it ships.

It starts, on loopback only, a redis-server in a temporary folder, the sweeper and the
workers, with the action's own settings (FULFILMENT_ACTION, FULFILMENT_SQL,
FULFILMENT_EFFECT, FULFILMENT_REPLAY_SAFE, FULFILMENT_TIMEOUT) and short timers: the lease
as short as FULFILMENT_TIMEOUT allows, sweeps every 0.2 s, no Stripe API. It stops every
process it started (also on Ctrl-C or SIGTERM) and removes the folder unless ``--keep``.

Exit codes: 0 every payment was fulfilled exactly once or left ``interrupted`` for a person
(at most once); 1 a payment had two effects, an effect without ``fulfilled``, none at all
or did not settle; 2 the action or the options cannot be used.
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
from ledgerctl.prove_probe import NoProbe, Row, probe_for
from ledgerctl.scratch import Processes
from ledgerctl.terminal import rows_table, show
from workers.actions import build_action, unusable

EXIT_MORE_THAN_ONCE = 1
SCRATCH = {
    "REDIS_SENTINELS": "",
    "LEDGER_MIN_REPLICAS": "0",
    "STRIPE_MODE": "test",  # the generated events are test-mode payloads
    "CHECKOUT_LINE_ITEMS": "false",  # loopback only: nothing asks Stripe's API
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
@click.option("--row-seconds", type=float, help="Longest wait for one fault's payment.")
@click.option("--max-seconds", default=900.0, show_default=True, help="No fault starts after this.")
@click.option("--keep", is_flag=True, help="Keep the scratch folder (logs, calls).")
@click.option("--json", "as_json", is_flag=True, help="The rows as JSON.")
def prove_action(
    effects: str | None,
    effects_sql: str | None,
    effects_db: str | None,
    row_seconds: float | None,
    max_seconds: float,
    keep: bool,
    as_json: bool,
) -> None:
    """Run the configured action through the fault matrix on a scratch Redis: one row per
    fault (calls, effects, final state, verdict); exit 1 when any payment was applied more
    than once or has an effect without being fulfilled (docs/ACTIONS.md)."""
    environ = dict(os.environ)
    s = checked(environ)
    try:
        probe = probe_for(s, effects, effects_sql, effects_db)
    except NoProbe as exc:
        exit_with([str(exc)])
    try:
        probe("pi_prove_action_check")  # asked once before anything starts
    except Exception as exc:  # the user's probe: whatever it raises, said in one line
        exit_with([redact(f"effects probe: {type(exc).__name__}: {exc}".splitlines()[0])])
    replay_safe = build_action(s).replay_safe
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    folder = Path(tempfile.mkdtemp(prefix="prove-action-"))
    procs = Processes(folder)
    rows: list[Row] = []
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
    finally:
        procs.stop()
        if keep:
            click.echo(f"scratch folder kept: {folder}", err=True)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    report(rows, replay_safe, as_json)
    sys.exit(0 if all(row.ok for row in rows) else EXIT_MORE_THAN_ONCE)


def report(rows: list[Row], replay_safe: bool, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"replay_safe": replay_safe, "rows": [asdict(r) for r in rows]}))
        return
    failed = [row for row in rows if not row.ok]
    caption = f"{len(rows)} fault(s); replay-safe: {'yes' if replay_safe else 'no'}; " + (
        "every payment at most once, fulfilled or interrupted"
        if not failed
        else f"FAILED: {', '.join(row.fault for row in failed)}"
    )
    columns = ("fault", "calls", "effects", "state", "verdict", "note")
    shown_rows = [asdict(row) for row in rows]
    show(rows_table("prove-action", shown_rows, columns, ("calls", "effects"), caption))


COMMANDS = (prove_action,)
