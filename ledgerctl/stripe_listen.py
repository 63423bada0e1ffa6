"""``stripe listen`` for this service: the forwarding commands the banner and the README give,
and ``scripts/run.sh --stripe-cli``, which runs them as processes of the stack.

The event lists come from the event table and the settings (``ledger.subscriptions``: the
refund and dispute types only with REVERSAL_ACTION set). The Stripe
CLI forwards snapshot and thin events to one URL only from two ``stripe listen`` processes
(one process refuses both kinds for one destination), so thin events get a second command.
Both sessions sign with the one secret ``stripe listen --print-secret`` prints.
"""

import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping

from ledger.settings import given_secrets
from ledger.subscriptions import forwarded_types

CLI_LABEL = "cli"
PRINT_SECRET_TIMEOUT_S = 60.0
INSTALL_HINT = "scripts/install_stripe_cli.sh, or https://docs.stripe.com/stripe-cli"
SECRET = re.compile(r"whsec_[A-Za-z0-9_]+")
"""A webhook signing secret in the CLI's output (masked by ``main``)."""
RUN_HELP = (
    "also run stripe listen (logged in, or STRIPE_API_KEY) and accept its secret as 'cli'; "
    "STRIPE_API_BASE, for testing only, points it at a stand-in of Stripe"
)


class Refused(Exception):
    """--stripe-cli cannot run here; the message is the one line to print."""


def listen_argv(events: tuple[str, ...], forward_to: str) -> list[str]:
    return ["stripe", "listen", "--events", ",".join(events), "--forward-to", forward_to]


def forward_commands(forward_to: str, reversal: bool) -> list[str]:
    """The commands a developer runs: snapshot events, then thin events (``reversal``:
    REVERSAL_ACTION is set, so the refund and dispute types are asked for)."""
    return [
        shlex.join(listen_argv(events, forward_to))
        for events in forwarded_types(reversal)
        if events
    ]


def api_base_args(env: Mapping[str, str]) -> list[str]:
    """``--api-base`` from STRIPE_API_BASE, for testing against a stand-in of Stripe."""
    base = env.get("STRIPE_API_BASE", "")
    return ["--api-base", base] if base else []


def processes(
    env: Mapping[str, str], forward_to: str, reversal: bool, wait: str = ""
) -> dict[str, str]:
    """run.sh's extra processes: name -> command line. ``wait``, a shell command, runs first
    and the CLI only once it succeeds (run.sh: until the stack's web answers /readyz, since
    the CLI never retries a forward refused while gunicorn is not yet listening). The update
    check is skipped (the process runs beside the others; updating the CLI is the
    developer's business), and the secret the CLI prints when ready is masked, as the banner
    shows none."""
    names = ("stripe-listen", "stripe-listen-thin")
    extra = ["--skip-update", *api_base_args(env)]
    first = f"{wait} && " if wait else ""
    return {
        name: f"{first}{shlex.join([*listen_argv(events, forward_to), *extra])} 2>&1"
        f" | {mask_command()}"
        for name, events in zip(names, forwarded_types(reversal), strict=True)
        if events
    }


def print_secret(env: Mapping[str, str]) -> str:
    """The webhook signing secret of this machine's ``stripe listen`` sessions; Refused when
    there is no CLI or it is not logged in (and no STRIPE_API_KEY)."""
    stripe = shutil.which("stripe", path=env.get("PATH"))
    if stripe is None:
        raise Refused(f"--stripe-cli: no `stripe` on PATH (install the Stripe CLI: {INSTALL_HINT})")
    argv = [stripe, "listen", "--print-secret", *api_base_args(env)]
    try:
        done = subprocess.run(
            argv, env=dict(env), capture_output=True, text=True, timeout=PRINT_SECRET_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise Refused(
            f"--stripe-cli: `stripe listen --print-secret` gave no answer in "
            f"{PRINT_SECRET_TIMEOUT_S:g} s"
        ) from None
    secret = done.stdout.strip()
    if done.returncode != 0 or not secret.startswith("whsec_"):
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise Refused(
            "--stripe-cli: `stripe listen --print-secret` failed"
            f" ({said[0].strip() if said else f'exit {done.returncode}'}); "
            "log in with `stripe login` or set STRIPE_API_KEY"
        )
    return secret


def with_cli_secret(env: Mapping[str, str], secret: str) -> dict[str, str]:
    """``env`` with the CLI's secret among STRIPE_WEBHOOK_SECRET, labelled ``cli``."""
    found = given_secrets(env)
    if found is None or secret in found[0]:  # None: wrong, the start-up check names it
        return dict(env)
    given, labels = found
    if len(labels) != len(given):
        raise Refused(
            "--stripe-cli: label each STRIPE_WEBHOOK_SECRET in STRIPE_WEBHOOK_SECRET_LABELS "
            f"(the CLI's is added as '{CLI_LABEL}')"
        )
    return {
        **env,
        "STRIPE_WEBHOOK_SECRET": ",".join([*given, secret]),
        "STRIPE_WEBHOOK_SECRET_LABELS": ",".join([*labels, CLI_LABEL]),
    }


def cli_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with stripe listen's secret added (run.sh --stripe-cli), or exit 2 with one
    line saying why it cannot run."""
    try:
        return with_cli_secret(env, print_secret(env))
    except Refused as refused:
        print(refused, file=sys.stderr)
        raise SystemExit(2) from None


def mask_command() -> str:
    """This module as a line filter (its ``main``), with this Python."""
    return shlex.join([sys.executable, "-u", "-m", __name__])


def main() -> None:
    """Copy stdin to stdout line by line, each webhook secret masked: the CLI prints its
    secret when ready, and run.sh shows secrets by fingerprint only."""
    for line in sys.stdin:
        sys.stdout.write(SECRET.sub("whsec_***", line))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
