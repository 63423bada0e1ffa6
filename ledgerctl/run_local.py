"""What ``scripts/run.sh`` runs: the Procfile's processes (``--ha``: Procfile.ha's Redis
nodes and Sentinels in place of its redis, a replicated ledger) under honcho's manager,
with local defaults, a banner, a "ready" line once this stack's own server answers
/readyz, and output that survives its reader going away. Before anything starts it
refuses (one line each, exit 2) a port that is taken and a data folder another stack
holds (ledgerctl/local_guard.py). Single-node keeps its data in var/redis and
var/downstream.sqlite3, ``--ha`` in var/ha.

``scripts/run.sh | tee log`` then Ctrl-C: the terminal sends SIGINT to ``tee`` as well, and
honcho's own ``honcho start`` dies of BrokenPipeError writing "SIGINT received" to the
closed pipe, leaving Redis, gunicorn, the workers and the sweeper running. Here the output
drops what it cannot write, so the manager goes on to stop every process (SIGTERM to each
process group, Redis once the others are gone, SIGKILL to any left after 5 s:
ledgerctl/stack_stop.py). A closed terminal (SIGHUP) stops them the same way.
"""

import argparse
import functools
import os
import secrets
import shlex
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from honcho.environ import expand_processes, parse_procfile
from honcho.manager import Manager
from honcho.printer import Printer
from honcho.process import Popen, Process

from ledger import setting_kinds as kinds
from ledger import settings as settings_module
from ledger.limits import DEFAULT_WEB_PORT
from ledger.setting_fields import (
    SettingsError,
    exit_with,
    field_named,
    load,
    or_exit,
    read,
    setting,
)
from ledgerctl import ha, local_guard, stack_ready, stripe_listen
from ledgerctl.banner import TOOLS_ENV, banner, base_url, ready_line, tools_env
from ledgerctl.stack_stop import OrderedStop, say

DEV_ENV = Path("var/dev.env")
CHECK_HELP = (
    "only check what would refuse the start (its settings, ports, data folder): exit 0, or 2"
    " with one line each; nothing starts or is held (examples/shop/run.sh's first step)"
)
NOT_READY_NOTE_S = 60.0
"""After this long without an answer from /readyz, say so (once) and keep waiting."""


@dataclass(frozen=True)
class Local:
    """What only scripts/run.sh reads."""

    WORKERS: int = setting(2, kinds.whole(1, 64))
    """RQ workers to run."""
    REDIS_PORT: int = setting(6389, kinds.whole(1, 65535))
    """The port of the Procfile's redis (REDIS_URL points at it unless set)."""


def ledger_url(env: Mapping[str, str]) -> str:
    """REDIS_URL, else the Procfile's redis on loopback at REDIS_PORT, as :func:`local_env`
    gives this script's processes: where a tool beside them given the same settings finds
    the ledger (the replay script). A REDIS_PORT that is no port raises SettingsError."""
    if env.get("REDIS_URL"):
        return env["REDIS_URL"]
    values, problems = read([field_named(Local, "REDIS_PORT")], env)
    if problems:
        raise SettingsError(problems)
    return f"redis://127.0.0.1:{values.get('REDIS_PORT', Local.REDIS_PORT)}/0"


def ledger_settings() -> settings_module.Settings:
    """The service's settings from the environment, its ledger found as this script finds it
    (REDIS_SENTINELS, else REDIS_URL, else REDIS_PORT): what the tools beside a stack read
    (webhook-ledger, the replay script). A wrong one: one line each, exit 2."""
    if os.environ.get("REDIS_SENTINELS"):
        return settings_module.load_or_exit()
    [url] = or_exit(lambda: ledger_url(os.environ))
    return settings_module.load_or_exit({**os.environ, "REDIS_URL": url})


class PipeSafeOutput:
    """A file descriptor that outlives its reader: once a write fails (the pipe's reader
    exited, as ``| head`` does), later output is dropped instead of raising."""

    def __init__(self, fd: int = 1) -> None:
        self.fd, self.broken = fd, False

    def write(self, text: str) -> int:
        data = text.encode(errors="replace")
        while data and not self.broken:
            try:
                data = data[os.write(self.fd, data) :]
            except OSError:
                self.broken = True
        return len(text)

    def flush(self) -> None:
        """Every write goes straight to the descriptor."""

    def isatty(self) -> bool:
        return os.isatty(self.fd)


def dev_values() -> dict[str, str]:
    """The local webhook secret and ops token, made once and kept in var/dev.env (0600)."""
    if not DEV_ENV.exists():
        DEV_ENV.parent.mkdir(parents=True, exist_ok=True)
        secret, token = "whsec_" + secrets.token_hex(24), secrets.token_urlsafe(24)
        text = f"DEV_WEBHOOK_SECRET={secret}\nDEV_OPS_TOKEN={token}\n"
        descriptor = os.open(DEV_ENV, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(text)
    pairs = (line.partition("=") for line in DEV_ENV.read_text().splitlines())
    return {name: value for name, _, value in pairs if name}


def write_tools_env(path: Path, values: Mapping[str, str]) -> None:
    """What the tools in another terminal need of this run (banner.tools_env), as ``export``
    lines for ``. var/run.env``, readable by this user only, as var/dev.env (it may hold the
    downstream's password); written on every start, so none is left from an earlier one."""
    lines = [f"# scripts/run.sh: . {path} in another terminal (it holds secrets: 0600)"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in values.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # a file an earlier run left with wider permissions
    with os.fdopen(descriptor, "w") as out:
        out.write("\n".join(lines) + "\n")


def local_env(
    environ: Mapping[str, str], dev: Mapping[str, str], root: Path, data: Path | None = None
) -> dict[str, str]:
    """The processes' environment: what is set wins, local defaults fill the rest. The local
    secret is always among the active ones (labelled ``local`` when the others are
    labelled), so the replay script can sign with it beside ``stripe listen``'s. The
    downstream sqlite file is in ``data`` (var/ by default)."""
    env = dict(environ)
    defaults = {
        "REDIS_PORT": "6389",
        "WEB_PORT": str(DEFAULT_WEB_PORT),
        "HOST": "127.0.0.1",
        "STRIPE_MODE": "test",  # local work forwards test-mode events: they must fulfil
        "FULFILMENT_ACTION": f"sqlite:///{(data or root / 'var') / 'downstream.sqlite3'}",
        "OPS_TOKEN": dev["DEV_OPS_TOKEN"],
    }
    env |= {name: value for name, value in defaults.items() if not env.get(name)}
    if not env.get("REDIS_URL"):
        env["REDIS_URL"] = f"redis://127.0.0.1:{env['REDIS_PORT']}/0"
    env["PATH"] = f"{root / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    local = dev["DEV_WEBHOOK_SECRET"]
    found = settings_module.given_secrets(env)  # None: wrong, the start-up check names it
    if found is not None and local not in found[0]:
        given, labels = found
        if len(labels) == len(given):
            labels.append("local")
        env["STRIPE_WEBHOOK_SECRET"] = ",".join([*given, local])
        env["STRIPE_WEBHOOK_SECRET_LABELS"] = ",".join(labels)
    return env


def replicated_env(env: Mapping[str, str], topology: ha.Topology) -> dict[str, str]:
    """``--ha``: a primary, two replicas and three Sentinels on loopback (their files in
    var/ha, written once), found through the Sentinels, each write on one replica too."""
    given = {
        "REDIS_SENTINELS": topology.sentinels_setting,
        "REDIS_SENTINEL_MASTER": ha.MASTER,
        "LEDGER_MIN_REPLICAS": "1",
    }
    return {**given, **{name: value for name, value in env.items() if value}}


def announce_when_ready(manager: Manager, env: Mapping[str, str]) -> None:
    """Print the ready line once this stack's server answers /readyz 200: the pid it
    reports is one of this process's descendants (a note if it takes long)."""
    started, noted = time.monotonic(), False
    while why := stack_ready.not_ready(base_url(env), os.getpid()):
        if not noted and time.monotonic() - started > NOT_READY_NOTE_S:
            say(manager, f"not ready after {NOT_READY_NOTE_S:g} s ({why}); still waiting")
            noted = True
        time.sleep(0.5)
    say(manager, ready_line(env))


def refusals(
    env: Mapping[str, str], local: Local, topology: ha.Topology | None, hold: bool = True
) -> list[str]:
    """Why this stack must not start: a port of it taken, its data folder held by another
    stack (held from here on by this one, unless ``hold`` is false: a check only)."""
    ports = {"WEB_PORT": f"{env['HOST']}:{env['WEB_PORT']}"}
    if topology is None:
        ports["REDIS_PORT"] = f"127.0.0.1:{local.REDIS_PORT}"
        folder = Path("var/redis")
    else:
        nodes = [*topology.node_ports, *topology.sentinel_ports]
        ports |= {f"--ha port {port}": f"127.0.0.1:{port}" for port in nodes}
        folder = Path("var/ha")
    held = local_guard.hold(folder) if hold else local_guard.free(folder)
    return [held] if held else local_guard.taken_ports(ports)


def processes(replicated: bool) -> dict[str, str]:
    """The Procfile's processes (the worker and the sweeper start their work again when it
    ends: workers/supervise.py); ``--ha``: Procfile.ha's Redis nodes and Sentinels instead of
    the Procfile's single redis."""
    app = parse_procfile(Path("Procfile").read_text()).processes
    if not replicated:
        return app
    nodes = parse_procfile(Path("Procfile.ha").read_text()).processes
    return {**nodes, **{name: cmd for name, cmd in app.items() if name != "redis"}}


def holding(process: Process) -> None:
    """The process keeps the stack's data folder held while it runs: it is started with the
    lock's descriptor open (honcho's Popen closes every other), as its exec'd program is
    (redis-server, gunicorn and its workers, the workers, the sweeper), so the folder stays
    held as long as one of them lives, the launcher killed or not (ledgerctl/local_guard.py)."""
    process._child_ctor = functools.partial(Popen, pass_fds=local_guard.held())


def main() -> None:
    parser = argparse.ArgumentParser(prog="scripts/run.sh", description=__doc__.split("\n")[0])
    parser.add_argument("--ha", action="store_true", help="a replicated ledger (Procfile.ha)")
    parser.add_argument("--stripe-cli", action="store_true", help=stripe_listen.RUN_HELP)
    parser.add_argument("--check", action="store_true", help=CHECK_HELP)
    args = parser.parse_args()
    replicated = args.ha
    root = Path.cwd()
    dev = dev_values()
    topology = ha.Topology(root / "var" / "ha", config=root / "config")
    source = stripe_listen.cli_env(os.environ) if args.stripe_cli else os.environ
    env = local_env(source, dev, root, topology.base if replicated else None)
    if replicated:
        env = replicated_env(env, topology)
    required = ("STRIPE_WEBHOOK_SECRET",)
    local, settings = or_exit(lambda: load(Local, env), lambda: settings_module.load(env, required))
    problems = refusals(env, local, topology if replicated else None, hold=not args.check)
    if problems:  # before anything starts: one line per problem, exit code 2
        exit_with(problems)
    if args.check:
        return
    if replicated:
        ha.write(topology)
    env_file = Path(TOOLS_ENV).parent / "ha" / "run.env" if replicated else Path(TOOLS_ENV)
    write_tools_env(env_file, tools_env(env, settings))
    output = PipeSafeOutput()
    output.write(
        banner(
            env,
            settings,
            dev["DEV_WEBHOOK_SECRET"],
            dev["DEV_OPS_TOKEN"],
            args.stripe_cli,
            str(env_file),
        )
    )
    manager = OrderedStop(Printer(output))
    concurrency = {"worker": local.WORKERS}
    for p in expand_processes(processes(replicated), concurrency=concurrency, env=env):
        holding(manager.add_process(p.name, p.cmd, quiet=p.quiet, env=p.env))
    if args.stripe_cli:
        forward_to = f"{base_url(env).removeprefix('http://')}/webhooks/stripe"
        wait = stack_ready.wait_command(base_url(env), os.getpid())  # nothing forwarded is lost
        listeners = stripe_listen.processes(env, forward_to, settings.reversal_on, wait)
        for name, command in listeners.items():
            holding(manager.add_process(name, command, env=env))
    signal.signal(signal.SIGHUP, lambda *_: os.kill(os.getpid(), signal.SIGTERM))
    threading.Thread(target=announce_when_ready, args=(manager, env), daemon=True).start()
    manager.loop()
    sys.exit(manager.returncode)


if __name__ == "__main__":
    main()
