"""The web process's own settings: where it listens, how many processes and connections.

gunicorn.conf.py reads them in gunicorn's master, before it forks, together with the
service's settings (ledger/settings.py): a misconfigured web process exits once, with one
line per problem, instead of one traceback per worker. The worker class is loaded here as
gunicorn's master loads it next (its module imported, nothing patched by gevent yet).
"""

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gunicorn.util import load_class
from gunicorn.workers import SUPPORTED_WORKERS
from gunicorn.workers.base import Worker

from ledger import limits, settings
from ledger import setting_kinds as kinds
from ledger.setting_fields import load, or_exit, setting

REQUIRED = ("STRIPE_WEBHOOK_SECRET",)
"""Settings the web process cannot start without (the worker, sweeper and CLI can)."""
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@dataclass(frozen=True)
class Server:
    WEB_PORT: int | None = setting(None, kinds.whole(1, 65535))
    """The port, when it must differ from the platform's PORT (scripts/run.sh sets it);
    neither set: 8000."""
    PORT: int | None = setting(None, kinds.whole(1, 65535))
    """The platform's port (Heroku-style platforms and honcho set it)."""
    HOST: str = setting("", kinds.host())
    """Where to listen; by default 127.0.0.1, or every interface under the platform's PORT."""
    WEB_CONCURRENCY: int = setting(2, kinds.whole(1, 256))
    """Web processes."""
    GUNICORN_WORKER_CONNECTIONS: int = setting(500, kinds.whole(1, 100_000))
    """Connections per web process (DEPLOYMENT.md, "Web connections")."""
    GUNICORN_THREADS: int = setting(4, kinds.whole(1, 1024))
    """Threads per process of the ``gthread`` worker class."""
    GUNICORN_WORKER_CLASS: str = setting("webhook.server.Worker", kinds.text())
    """gunicorn's worker class (one of its names, or ``module.Class``: one it cannot load
    stops start-up); ``gthread`` or ``sync`` only for comparison: they have no body deadline
    and answer malformed HTTP with gunicorn's own HTML."""
    GUNICORN_REUSE_PORT: bool | None = setting(None, kinds.boolean())
    """Each worker listens on its own socket (SO_REUSEPORT) and the kernel spreads new
    connections across them; false: one socket shared by every worker. Unset: on Linux only,
    where the kernel balances such sockets (WEB.md, "One socket per worker")."""
    GUNICORN_ACCESS_LOG: str = setting("", kinds.text())
    """gunicorn's access log file (``-``: standard output); unset: none. gunicorn's master
    refuses a file it cannot append to (ledger/setting_files.py)."""
    LOG_LEVEL: str = setting("info", kinds.choice(*LOG_LEVELS))
    """gunicorn's log level."""

    @property
    def reuse_port(self) -> bool:
        """GUNICORN_REUSE_PORT, else whether this is Linux."""
        given = self.GUNICORN_REUSE_PORT
        return sys.platform == "linux" if given is None else given

    @property
    def bind(self) -> str:
        """WEB_PORT, else PORT, else DEFAULT_WEB_PORT; a platform's PORT on every interface
        unless HOST says otherwise, as gunicorn itself does when PORT is set."""
        platform = bool(self.PORT and not self.WEB_PORT)
        host = self.HOST or ("0.0.0.0" if platform else "127.0.0.1")
        return f"{host}:{self.WEB_PORT or self.PORT or limits.DEFAULT_WEB_PORT}"


MIGRATE_REQUESTS = Path("/proc/sys/net/ipv4/tcp_migrate_req")
"""Linux 5.14+: 1 hands the connections queued on a closed SO_REUSEPORT socket to another."""


def reuse_port_caveat() -> str | None:
    """A warning when a worker that stops would reset the connections queued on its socket
    (a restart, a reload), as it does unless the kernel migrates them; else None."""
    try:
        if MIGRATE_REQUESTS.read_text().strip() != "0":
            return None
    except OSError:
        pass  # no such setting: this kernel never migrates them
    return (
        "GUNICORN_REUSE_PORT: a worker that stops resets the connections queued on its socket"
        " (Stripe retries them); set net.ipv4.tcp_migrate_req=1 to hand them to the others"
    )


def worker_class_refusal(uri: str) -> str | None:
    """Why gunicorn cannot run ``uri`` as its worker class (as its master loads it: one of
    its names, ``module.Class`` or ``egg:dist#name``), else None; never its traceback."""
    expected = f"expected one of {', '.join(SUPPORTED_WORKERS)}, or an importable module.Class"
    try:
        found = load_class(uri)
    except (RuntimeError, AttributeError):  # RuntimeError wraps any failure to import it
        return f"gunicorn cannot load it; {expected}"
    if not (isinstance(found, type) and issubclass(found, Worker)):
        return f"not a gunicorn worker class; {expected}"
    return None


def server_rules(server: Server, failed: set[str]) -> list[tuple[str, str]]:
    """The web process's checks beyond each value read (ledger/setting_fields.py's rules)."""
    refusal = (
        None
        if "GUNICORN_WORKER_CLASS" in failed
        else worker_class_refusal(server.GUNICORN_WORKER_CLASS)
    )
    return [("GUNICORN_WORKER_CLASS", refusal)] if refusal else []


def load_or_exit(environ: Mapping[str, str] | None = None) -> Server:
    """The web process's settings, after every setting the service reads is checked; else
    exit with one line per problem (code 2)."""
    env = os.environ if environ is None else environ
    server: Server = or_exit(
        lambda: load(Server, env, rules=server_rules), lambda: settings.load(env, REQUIRED)
    )[0]
    return server
