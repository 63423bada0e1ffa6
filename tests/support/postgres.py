"""A real PostgreSQL server on a free loopback port, its cluster in a temp dir made by
Debian's ``initdb`` (scripts/bootstrap.sh installs the ``postgresql`` package when it is
missing): the user's own database of the PostgreSQL action. The postmaster runs in the
foreground as this process's child (as the ``postgres`` user when the tests run as root:
PostgreSQL refuses root), so it is stopped and killed by its PID.

Passwords are checked over TCP (scram-sha-256); no Unix socket is made. The superuser is
``postgres`` (password SUPERUSER_PASSWORD); :meth:`PostgresServer.database` adds a user
and a database of its own for a test.
"""

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.processes import children, free_port, wait_until
from tests.support.stopping import stop
from workers.postgres_schema import migrate

SUPERUSER_PASSWORD = "pg-super-pw"
USER_PASSWORD = "shop-pw-9f3k"
"""The password of each test database's owner (the tests check it is never shown)."""
ORDER_SQL = (
    "INSERT INTO shop_orders (payment_key, amount, currency)"
    " VALUES (%(payment_key)s, %(amount)s, %(currency)s) RETURNING id"
)
"""A shop's effect (FULFILMENT_SQL): one order row per payment, its id the receipt."""


def binaries() -> Path:
    """The newest installed PostgreSQL's bin directory (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=_version)
    if found:
        return Path(found[-1]).parent
    exe = shutil.which("postgres")
    if exe is None:
        raise RuntimeError("PostgreSQL not found: run scripts/bootstrap.sh")
    return Path(exe).parent


def _version(path: str) -> int:
    return int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0


def _owner() -> dict[str, Any]:
    """Popen's arguments to run as ``postgres`` when this process is root."""
    if os.getuid() != 0:
        return {}
    user = pwd.getpwnam("postgres")
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


class PostgresServer:
    """``initdb`` once, then a postmaster that can be stopped, killed and started again on
    the same port and data."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.settings = {"fsync": "on", "synchronous_commit": "on", **(settings or {})}
        # Under /tmp, not pytest's tmp_path: the postgres user cannot enter root's 0700 dirs.
        self.root = Path(tempfile.mkdtemp(prefix="ledger-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.proc: subprocess.Popen | None = None
        self._initdb()

    def _initdb(self) -> None:
        owner = _owner()
        if owner:
            os.chown(self.root, owner["user"], owner["group"])
        pwfile = self.root / "pwfile"
        pwfile.write_text(SUPERUSER_PASSWORD + "\n")
        if owner:
            os.chown(pwfile, owner["user"], owner["group"])
        subprocess.run(
            [
                str(binaries() / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--no-sync",  # a test cluster: the server itself runs with fsync on
                "--encoding=UTF8",
                "--locale=C",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            **owner,
        )

    def url(self, user: str = "postgres", password: str = SUPERUSER_PASSWORD, db: str = "") -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{db or 'postgres'}"

    def start(self) -> "PostgresServer":
        argv = [str(binaries() / "postgres"), "-D", str(self.data), "-p", str(self.port)]
        argv += ["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="]
        argv += ["-c", "max_connections=60", "-c", "shared_buffers=32MB"]
        for name, value in self.settings.items():
            argv += ["-c", f"{name}={value}"]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=out, **_owner())
        wait_until(self.accepts, timeout=60, interval=0.1, what="postgres accepting connections")
        return self

    def accepts(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"postgres exited {self.proc.returncode}: {self.log.read_text()}")
        try:
            psycopg.connect(self.url(), connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def kill(self) -> None:
        """``kill -9`` of the postmaster, then until every backend it had has exited (they
        notice their postmaster is gone): a new postmaster refuses to start while one
        still holds the old shared memory."""
        assert self.proc is not None
        backends = children(self.proc.pid)
        stop(self.proc, signal.SIGKILL)
        wait_until(
            lambda: not any(Path(f"/proc/{pid}").exists() for pid in backends),
            timeout=30,
            what="the killed postmaster's backends to exit",
        )
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)  # SIGTERM: PostgreSQL's smart shutdown
            self.proc = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def admin(self, sql: str, db: str = "") -> None:
        """Run ``sql`` as the superuser (autocommit: CREATE DATABASE and the like)."""
        with psycopg.connect(self.url(db=db), autocommit=True) as conn:
            conn.execute(sql)

    def database(self, name: str) -> str:
        """A new database ``name`` owned by a new user ``name``; its URL."""
        self.admin(f"CREATE USER {name} PASSWORD '{USER_PASSWORD}'")
        self.admin(f"CREATE DATABASE {name} OWNER {name}")
        return self.url(name, USER_PASSWORD, name)


def make_shop(url: str) -> str:
    """The shop's orders table in the database at ``url`` (no unique key: a second effect
    would be a second row) and the service's own table, migrated; ``url``."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE shop_orders (id bigserial PRIMARY KEY, payment_key text NOT NULL,"
            " amount bigint, currency text)"
        )
    migrate(url)
    return url


def orders_per_payment(url: str) -> dict[str, int]:
    """Order rows per payment key: the effects, counted in the user's own table."""
    with psycopg.connect(url) as conn:
        found = conn.execute("SELECT payment_key, count(*) FROM shop_orders GROUP BY 1")
        return {key: int(n) for key, n in found.fetchall()}


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.remove()


_made = iter(range(1, 1_000_000))


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh database and its owner for one test: ``postgresql://shopN:…@127.0.0.1:P/shopN``."""
    return postgres_server.database(f"shop{os.getpid()}_{next(_made)}")


def shop_actions(url: str) -> dict[str, str]:
    """The example shop's actions on database ``url``: grant.sql fulfils, revoke.sql takes back."""
    shop = Path(__file__).resolve().parents[2] / "examples" / "shop"
    return {
        "FULFILMENT_ACTION": url,
        "FULFILMENT_SQL": f"@{shop / 'grant.sql'}",
        "REVERSAL_ACTION": url,
        "REVERSAL_SQL": f"@{shop / 'revoke.sql'}",
    }
