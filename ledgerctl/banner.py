"""What ``scripts/run.sh`` prints before and after the stack starts: where to point Stripe,
which webhook secrets are active (by label and fingerprint, never the secret), where the
dashboard is, and a "ready" line once /readyz answers.

Configured URLs are shown with their credentials masked (``ledger.redact``): REDIS_URL may
carry a password; an http(s) FULFILMENT_ACTION or REVERSAL_ACTION is shown by its origin
only (its path or query may hold a key), and REVERSAL_ACTION is given to export only when
nothing of it is masked.
"""

from collections.abc import Mapping
from pathlib import Path

from ledger import limits
from ledger.connection import describe
from ledger.redact import downstream, mask_url
from ledger.setting_fields import spelled
from ledger.setting_urls import ActionSpec
from ledger.settings import Settings, fingerprint
from ledgerctl.stripe_listen import forward_commands

FINGERPRINT_HOWTO = 'printf %s "$SECRET" | sha256sum | cut -c1-8'


def base_url(env: Mapping[str, str]) -> str:
    """Where a browser on this machine reaches the web process."""
    host = env.get("HOST", "127.0.0.1")
    host = "127.0.0.1" if host in ("0.0.0.0", "[::]", "") else host
    return f"http://{host}:{web_port(env)}"


def secret_lines(settings: Settings, local_secret: str) -> list[str]:
    """One line per active webhook secret: its label, its fingerprint, where it comes from."""
    width = max(len(label) for label in settings.secret_labels)
    lines = []
    for secret, label in zip(settings.STRIPE_WEBHOOK_SECRET, settings.secret_labels, strict=True):
        origin = (
            "var/dev.env; scripts/replay_events.py signs with it" if secret == local_secret else ""
        )
        lines.append(f"{label:<{width}}  {fingerprint(secret)}  {origin}".rstrip())
    return lines


def forward_lines(env: Mapping[str, str], reversal: bool, cli_running: bool) -> str:
    """How to get Stripe's test events here: the ``stripe listen`` commands (snapshot events,
    then thin ones, lists from the event table and REVERSAL_ACTION), or that run.sh runs them
    itself."""
    if cli_running:
        return "stripe listen runs here: processes stripe-listen, stripe-listen-thin"
    forward_to = f"{base_url(env).removeprefix('http://')}/webhooks/stripe"
    commands = forward_commands(forward_to, reversal)
    return "\n                ".join(commands)


def banner(
    env: Mapping[str, str],
    settings: Settings,
    local_secret: str,
    dev_token: str,
    cli_running: bool = False,
) -> str:
    """The banner for this environment and its (already checked) settings."""
    url = base_url(env)
    secrets = "\n                ".join(secret_lines(settings, local_secret))
    token = (
        f"{dev_token}   (var/dev.env)"
        if settings.OPS_TOKEN == (dev_token,)
        else "from OPS_TOKEN (not shown)"
    )
    return f"""\
Stripe webhook ledger
  endpoint      {url}/webhooks/stripe
  forward with  {forward_lines(env, settings.reversal_on, cli_running)}
  secrets       {secrets}
                a fingerprint is: {FINGERPRINT_HOWTO}
                scripts/run.sh --stripe-cli runs stripe listen and adds its secret as 'cli'
  dashboard     {url}/ops/   (any user name, the ops token as password)
  ops token     {token}
  redis         {redis_line(settings)}
  downstream    {downstream(str(settings.FULFILMENT_ACTION))}
  stripe mode   {settings.STRIPE_MODE}   \
(events of the other mode are held for a person; production defaults to live)
  tools         export PATH="$PWD/.venv/bin:$PATH"   (webhook-ledger, replay-events)
{moved_line(env, settings)}"""


def web_port(env: Mapping[str, str]) -> str:
    """The web process's port on this machine: WEB_PORT, unset or empty meaning the default
    (as gunicorn's bind reads it, webhook/serving.py)."""
    return env.get("WEB_PORT") or str(limits.DEFAULT_WEB_PORT)


def moved_line(env: Mapping[str, str], settings: Settings) -> str:
    """What the tools in another terminal need when this run is not at the default places."""
    moved = []
    if settings.REDIS_SENTINELS:
        moved.append(f"REDIS_SENTINELS={spelled(settings, 'REDIS_SENTINELS')}")
    elif settings.REDIS_URL != Settings.REDIS_URL:
        moved.append(f"REDIS_URL={mask_url(settings.REDIS_URL)}")
    port = web_port(env)
    if port != str(limits.DEFAULT_WEB_PORT):
        moved.append(f"WEB_PORT={port}")
    if moved_downstream(settings.FULFILMENT_ACTION):  # --ha: var/ha/downstream.sqlite3
        moved.append(f"FULFILMENT_ACTION={downstream(str(settings.FULFILMENT_ACTION))}")
    moved += [
        f"{name}={spelled(settings, name)}"
        for name in READ_BY_THE_TOOLS
        if getattr(settings, name) != getattr(Settings, name)
    ]
    reversal = None if settings.REVERSAL_ACTION is None else str(settings.REVERSAL_ACTION)
    shown_whole = reversal is not None and downstream(reversal) == reversal
    if shown_whole:
        moved.append(f"REVERSAL_ACTION={reversal}")
    line = f"                and in another terminal: export {' '.join(moved)}\n" if moved else ""
    if reversal is not None and not shown_whole:
        line += "                and REVERSAL_ACTION as the service has it (not shown: it may "
        line += "hold a secret)\n"
    return line


READ_BY_THE_TOOLS = (
    "QUEUE_NAME",
    "STUCK_QUEUED_SECONDS",
    "BREAKER_THRESHOLD",
    "BREAKER_COOLDOWN_SECONDS",
    "FULFILMENT_MAX_RATE",
    "FULFILMENT_TIMEOUT",
    "LEASE_SECONDS",
    "LEDGER_MIN_REPLICAS",
    "REVERSAL_PER_REFUND",
    "REVERSAL_DISPUTE_WON",
)
"""Settings webhook-ledger reads to say what it shows (stuck, the breaker's cool-down, the
rate, the queue) and to decide (a person's resolve reverses by REVERSAL_*): the tools in
another terminal read them from their own environment, so the banner gives those this run
changed (no secret is among them; REVERSAL_ACTION is given apart, by name if it holds one)."""


def moved_downstream(action: ActionSpec) -> bool:
    """Whether ``action`` is a SQLite file other than the default one (which the replay
    script's read-back finds by itself)."""
    default = Path(Settings.FULFILMENT_ACTION.target).resolve()
    return action.scheme == "sqlite" and Path(action.target).resolve() != default


def ready_line(env: Mapping[str, str]) -> str:
    url = base_url(env)
    return (
        f"ready: endpoint {url}/webhooks/stripe  dashboard {url}/ops/  "
        f"metrics {url}/metrics  (Ctrl-C stops everything)"
    )


def redis_line(settings: Settings) -> str:
    """Where the ledger is: one Redis, or the Sentinels of a replicated one."""
    if settings.REDIS_SENTINELS:
        return (
            f"{describe(settings)}\n                "
            f"(LEDGER_MIN_REPLICAS={settings.LEDGER_MIN_REPLICAS}; run.sh --ha: var/ha)"
        )
    return f"{describe(settings)} (data in var/redis, append-only, fsync always)"
