"""What ``scripts/run.sh`` prints before and after the stack starts: where to point Stripe,
which webhook secrets are active (by label and fingerprint, never the secret), where the
dashboard is, and a "ready" line once /readyz answers.

Configured URLs are shown with their credentials masked (``ledger.redact``): REDIS_URL may
carry a password; an http(s) FULFILMENT_ACTION or REVERSAL_ACTION is shown by its origin
only (its path or query may hold a key). What another terminal needs, secrets included, is
written to var/run.env (0600, as var/dev.env) for it to source, never printed.
"""

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path

from ledger import limits
from ledger.connection import describe
from ledger.redact import downstream, mask_url
from ledger.setting_fields import field_named, masked, spelled
from ledger.setting_urls import ActionSpec
from ledger.settings import Settings, effect_line, fingerprint
from ledgerctl.stripe_listen import forward_commands

FINGERPRINT_HOWTO = 'printf %s "$SECRET" | sha256sum | cut -c1-8'
TOOLS_ENV = "var/run.env"
"""Where scripts/run.sh writes what the tools in another terminal need (``tools_env``);
``--ha``: var/ha/run.env."""


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
    env_file: str = TOOLS_ENV,
) -> str:
    """The banner for this environment and its (already checked) settings."""
    url = base_url(env)
    secrets = "\n                ".join(secret_lines(settings, local_secret))
    token = (  # never the token itself: this output is often kept (`| tee log`)
        "DEV_OPS_TOKEN of var/dev.env (not shown: `. var/dev.env; echo $DEV_OPS_TOKEN`)"
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
{downstream_lines(settings)}  stripe mode   {settings.STRIPE_MODE}   \
(events of the other mode are held for a person; production defaults to live)
  tools         export PATH="$PWD/.venv/bin:$PATH"   (webhook-ledger, replay-events)
{moved_line(env, settings, env_file)}"""


def downstream_lines(settings: Settings) -> str:
    """FULFILMENT_ACTION and REVERSAL_ACTION, each with what its built-in database runs
    beside the key (``effect: none``: only the key is recorded, said so)."""
    lines = ""
    shown = [("downstream", settings.FULFILMENT_ACTION, False)]
    if settings.REVERSAL_ACTION is not None:
        shown.append(("reversal", settings.REVERSAL_ACTION, True))
    for name, action, reversal in shown:
        lines += f"  {name:<14}{downstream(str(action))}\n"
        effect = effect_line(settings, reversal)
        lines += f"                {effect}\n" if effect else ""
    return lines


def web_port(env: Mapping[str, str]) -> str:
    """The web process's port on this machine: WEB_PORT, unset or empty meaning the default
    (as gunicorn's bind reads it, webhook/serving.py)."""
    return env.get("WEB_PORT") or str(limits.DEFAULT_WEB_PORT)


SENTINEL_SETTINGS = (
    "REDIS_SENTINELS",
    "REDIS_SENTINEL_MASTER",
    "REDIS_SENTINEL_DB",
    "REDIS_SENTINEL_TLS",
    "REDIS_SENTINEL_PASSWORD",
    "REDIS_PASSWORD",
)
"""What a tool needs to find and reach the primary through Sentinels."""


def tools_env(env: Mapping[str, str], settings: Settings) -> dict[str, str]:
    """What the tools in another terminal need of this run, as the service has it (secrets
    included: scripts/run.sh writes it to a file only its user reads, TOOLS_ENV): where the
    ledger and the web process are when not at the default places, and every other setting
    this run changed (the mode ``fulfil-session`` records under, the effect ``prove-action``
    runs, the rules ``webhook-ledger`` judges and decides by), but the run's own secrets."""
    found = {}
    if settings.REDIS_SENTINELS:
        for name in SENTINEL_SETTINGS:
            if name == "REDIS_SENTINELS" or getattr(settings, name) != getattr(Settings, name):
                found[name] = spelled(settings, name)
    elif settings.REDIS_URL != Settings.REDIS_URL:
        found["REDIS_URL"] = settings.REDIS_URL
    port = web_port(env)
    if port != str(limits.DEFAULT_WEB_PORT):
        found["WEB_PORT"] = port
    action = settings.FULFILMENT_ACTION
    if action.scheme != "sqlite" or moved_downstream(action):  # --ha: var/ha/downstream.sqlite3
        found["FULFILMENT_ACTION"] = str(action)
    if settings.REVERSAL_ACTION is not None:  # without it the tools take nothing back
        found["REVERSAL_ACTION"] = str(settings.REVERSAL_ACTION)
    placed = {*SENTINEL_SETTINGS, "REDIS_URL", "FULFILMENT_ACTION", "REVERSAL_ACTION"}
    found |= {
        spec.name: spelled(settings, spec.name)
        for spec in fields(Settings)
        if spec.name not in placed | set(NOT_FOR_THE_TOOLS)
        and getattr(settings, spec.name) != getattr(Settings, spec.name)
    }
    return found


def moved_line(env: Mapping[str, str], settings: Settings, env_file: str = TOOLS_ENV) -> str:
    """What another terminal sources to reach this run as its tools need (``tools_env``),
    with what it sets shown as everywhere else: URLs masked, an http(s) action by origin,
    secrets as their field masks them."""
    masks = {"REDIS_URL": mask_url, "FULFILMENT_ACTION": downstream, "REVERSAL_ACTION": downstream}
    masks["WEB_PORT"] = str  # not a setting of the service's: its server's port

    def show(name: str, value: str) -> str:
        return masks[name](value) if name in masks else masked(field_named(Settings, name), value)

    found = tools_env(env, settings)
    shown = " ".join(f"{name}={show(name, value)}" for name, value in found.items())
    return f"                and in another terminal: . {env_file}   ({shown})\n" if found else ""


NOT_FOR_THE_TOOLS = (
    "STRIPE_WEBHOOK_SECRET",
    "STRIPE_WEBHOOK_SECRET_LABELS",
    "OPS_TOKEN",
    "OPS_TOKEN_LABELS",
    "METRICS_TOKEN",
)
"""The run's own secrets, which no tool needs (``webhook-ledger secrets`` says so) and a
run.sh started from that terminal would take as its own, a stale ``cli`` secret with them."""


def moved_downstream(action: ActionSpec) -> bool:
    """Whether ``action`` is a SQLite file other than the default one (which the replay
    script's read-back finds by itself)."""
    default = Path(Settings.FULFILMENT_ACTION.target).resolve()
    return action.scheme == "sqlite" and Path(action.target).resolve() != default


def ready_line(env: Mapping[str, str]) -> str:
    url = base_url(env)
    return (
        f"ready: endpoint {url}/webhooks/stripe  dashboard {url}/ops/  "
        f"metrics {url}/metrics (bearer: the ops token)  (Ctrl-C stops everything)"
    )


def redis_line(settings: Settings) -> str:
    """Where the ledger is: one Redis, or the Sentinels of a replicated one."""
    if settings.REDIS_SENTINELS:
        return (
            f"{describe(settings)}\n                "
            f"(LEDGER_MIN_REPLICAS={settings.LEDGER_MIN_REPLICAS}; run.sh --ha: var/ha)"
        )
    return f"{describe(settings)} (data in var/redis, append-only, fsync always)"
