"""What every ``webhook-ledger`` command shares: settings and Redis, ``--json``, output and
exit codes (0 ok, 1 not there or not in that state, or for ``reconcile`` events missing and
not recorded, 2 usage or a wrong setting, 3 Redis unreachable, a write not confirmed by
LEDGER_MIN_REPLICAS replicas or the built-in downstream's file unusable, 4 Stripe's API
refused or could not be reached)."""

import sys
from collections.abc import Callable
from typing import TypeVar

import click
from redis import Redis
from redis.exceptions import RedisError
from rich.console import RenderableType
from rich.text import Text

from ledger import settings
from ledger.connection import connect
from ledger.deliveries import LedgerUnavailable
from ledger.downstream import DownstreamUnusable
from ledger.read.base import to_json
from ledger.redact import redact
from ledger.replication import NotReplicated
from ledgerctl.run_local import ledger_settings
from ledgerctl.terminal import say, show

EXIT_NOT_FOUND, EXIT_REDIS, EXIT_STRIPE = 1, 3, 4
T = TypeVar("T")

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON instead of a table or text."
)


class Context:
    """Settings from the environment, checked on first use (a wrong one ends the command
    with one line per problem, exit code 2), the ledger found as scripts/run.sh finds it
    (REDIS_PORT without REDIS_URL: that stack's Redis); Redis connected on first use."""

    def __init__(self) -> None:
        self._settings: settings.Settings | None = None
        self._redis: Redis | None = None

    @property
    def settings(self) -> settings.Settings:
        if self._settings is None:
            self._settings = ledger_settings()
        return self._settings

    @property
    def redis(self) -> Redis:
        if self._redis is None:
            self._redis = connect(self.settings)
        return self._redis


def emit(data: object, as_json: bool, *text: RenderableType) -> None:
    """``data`` (an object of ledger/read/: what the ops API answers) as indented JSON, or
    the ``text`` tables and lines when given and JSON was not asked for."""
    if as_json or not text:
        sys.stdout.write(to_json(data, indent=True).decode() + "\n")
        return
    for part in text:
        show(part)


def run(fn: Callable[[], T]) -> T:
    """``fn()``; an unreachable Redis, a write fewer than LEDGER_MIN_REPLICAS replicas
    confirmed, or a built-in downstream file that cannot be used ends the command with exit
    code 3."""
    try:
        return fn()
    except DownstreamUnusable as exc:  # the path is the user's own setting: shown whole
        say(Text("Downstream unusable:", "red"), f"{exc.path}: {exc.why}")
        sys.exit(EXIT_REDIS)
    except NotReplicated as exc:
        say(Text("Not confirmed by the replicas:", "red"), redact(str(exc)))
        sys.exit(EXIT_REDIS)
    except (RedisError, LedgerUnavailable) as exc:
        say(Text("Redis unreachable:", "red"), redact(str(exc)))
        sys.exit(EXIT_REDIS)
