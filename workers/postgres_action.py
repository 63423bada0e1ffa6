"""The built-in PostgreSQL action (``FULFILMENT_ACTION=postgresql://user@host:port/db``):
the payment's idempotency key and the user's effect commit together in the user's own
database (the inbox pattern), so the action is replay-safe by construction. A worker killed
before COMMIT leaves nothing; one killed after it leaves the key, and the re-run finds it
and answers the first call's receipt without running the effect again.

One transaction per call: the deadline set inside PostgreSQL (statement, lock and idle
timeouts from what is left of FULFILMENT_TIMEOUT), the key inserted (``ON CONFLICT DO
NOTHING``: a concurrent attempt with the same key waits on its row, then finds it), the
effect (FULFILMENT_SQL or FULFILMENT_EFFECT, workers/effects.py), the receipt stored, COMMIT.
The table is workers/postgres_schema.py's, made by ``webhook-ledger downstream migrate``.

Each worker process has its own small pool (psycopg_pool), made again after a fork: a
pool's connections and threads belong to the process that opened them.
"""

import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from workers.effects import Effect, Receipt, sql_params
from workers.exceptions import (
    AmbiguousDownstreamError,
    FulfilmentError,
    PermanentDownstreamError,
    TransientDownstreamError,
)
from workers.postgres_schema import TABLE, masked, password_parts

CONNECT_SHARE = 0.5
"""Of FULFILMENT_TIMEOUT, what waiting for a connection may take: then the downstream is
reported down (never sent), with time left to say so before the call's deadline."""
DATABASE_SHARE = 0.8
"""Of what is left of FULFILMENT_TIMEOUT once connected, each statement's limit inside
PostgreSQL (statement_timeout, lock_timeout, idle_in_transaction_session_timeout): the
database ends a blocked statement and answers before the worker's own deadline fires."""

RECONNECT_SECONDS = 5.0
"""How long the pool retries one lost connection (backing off 1, 2, 4 s) before it gives it
up; the next call starts afresh. psycopg_pool's default (5 minutes) backs off to two
minutes between attempts: a server back after a restart would wait that long."""

_SET_DEADLINE = (
    "SELECT set_config('statement_timeout', %(ms)s, true),"
    " set_config('lock_timeout', %(lock_ms)s, true),"
    " set_config('idle_in_transaction_session_timeout', %(ms)s, true)"
)
_INSERT_KEY = (
    f"INSERT INTO {TABLE} (idempotency_key, payment_key, token)"
    " VALUES (%(idempotency_key)s, %(payment_key)s, %(token)s)"
    " ON CONFLICT (idempotency_key) DO NOTHING RETURNING idempotency_key"
)
_FIRST_RECEIPT = (
    f"SELECT receipt, voided_at IS NOT NULL FROM {TABLE}"
    " WHERE idempotency_key = %(idempotency_key)s"
)
_VOID_KEY = (
    f"INSERT INTO {TABLE} (idempotency_key, payment_key, token, voided_at)"
    " VALUES (%(idempotency_key)s, %(payment_key)s, %(token)s, now())"
    " ON CONFLICT (idempotency_key) DO NOTHING RETURNING idempotency_key"
)
VOIDED = "postgresql: voided: the payment was taken back before this key applied"
_STORE_RECEIPT = (
    f"UPDATE {TABLE} SET receipt = %(receipt)s WHERE idempotency_key = %(idempotency_key)s"
)

RETRY_STATES = ("40", "55P03", "57014", "25P03")
"""SQLSTATEs (or classes) of a call rolled back that may pass later: serialization failure
and deadlock (class 40), lock_timeout (55P03), statement_timeout (57014) and
idle_in_transaction_session_timeout (25P03: a Python effect slow between its statements),
the deadlines set inside the database."""
DOWN_STATES = ("08", "53", "57P", "58")
"""The server as a whole: a connection exception, out of resources (too many connections,
disk full), shutting down or starting up, a system error."""
EFFECT_STATES = ("21", "22", "23", "25", "2B", "42", "44", "P0")
"""The effect itself is wrong for this payment: a constraint violation (23), bad data (22),
a missing table or column (42), an exception the user's SQL raised (P0)..."""


class PostgresAction:
    """Key and effect in one transaction in the user's PostgreSQL database."""

    replay_safe = True

    def __init__(self, url: str, timeout: float, effect: Effect | None) -> None:
        self.url = url
        self.timeout = timeout
        self.effect = effect
        self._pool: tuple[int, ConnectionPool] | None = None
        self._inherited: list[ConnectionPool] = []
        self._in_use: psycopg.Connection | None = None
        """The connection a call is using (its check by the pool too): ``abort``'s to cut."""
        self._in_use_lock = threading.Lock()  # abort never cuts a socket handed on since
        self.connect_error = ""
        """Why the pool's latest try to connect failed ('' once one succeeds): a timeout
        waiting for a connection says it, not only that none came."""

    def pool(self) -> ConnectionPool:
        """This process's pool, opened on first use and again after a fork."""
        if self._pool is None or self._pool[0] != os.getpid():
            if self._pool is not None:
                # The parent's: closing its connections here would end the parent's
                # sessions, and a collected pool closes them. Kept, never used.
                self._inherited.append(self._pool[1])
            pool: ConnectionPool = ConnectionPool(
                self.url,
                min_size=1,
                max_size=1,  # one per call slot (workers.jobs.context): one call at a time
                open=False,
                check=self._check,  # a server restarted since
                kwargs={"connect_timeout": max(2, math.ceil(self.timeout))},
                reconnect_timeout=RECONNECT_SECONDS,
                name=f"fulfilment-{os.getpid()}",
                timeout=self.timeout,
                connection_class=self._reporting_connection(),
            )
            pool.open(wait=False)
            self._pool = (os.getpid(), pool)
        return self._pool[1]

    def _reporting_connection(self) -> type[psycopg.Connection[Any]]:
        """psycopg's connection, keeping why the pool's tries to connect fail (in its own
        threads, where psycopg_pool only logs it) in :attr:`connect_error`."""
        action = self

        class Reporting(psycopg.Connection[Any]):
            @classmethod
            def connect(cls, *args: Any, **kwargs: Any) -> "Reporting":
                try:
                    conn = super().connect(*args, **kwargs)
                except psycopg.Error as exc:
                    action.connect_error = " ".join(str(exc).split())
                    raise
                action.connect_error = ""
                return conn

        return Reporting

    def close(self) -> None:
        """Close this process's pool (its connections, its threads)."""
        if self._pool is not None and self._pool[0] == os.getpid():
            self._pool[1].close()
        self._pool = None

    def __call__(self, purchase: Any) -> Receipt:
        return self._transaction(self._apply, purchase)

    def _check(self, conn: psycopg.Connection) -> None:
        """psycopg_pool's check of a connection it hands out, in the calling thread: a
        frozen server answers it no more than a statement, so ``abort`` cuts it too."""
        with self._using(conn):
            ConnectionPool.check_connection(conn)

    @contextmanager
    def _using(self, conn: psycopg.Connection) -> Iterator[None]:
        with self._in_use_lock:
            self._in_use = conn
        try:
            yield
        finally:
            with self._in_use_lock:
                self._in_use = None

    def abort(self) -> None:
        """At the call's deadline, from the thread waiting for it (a worker's slot): shut
        down the socket of the connection the call is using. libpq waits for the server in
        C, which no signal reaches in a helper thread, and a frozen server (a stalled VM)
        enforces no statement_timeout: without this the watchdog ended the worker process,
        every other call in flight with it. The call fails at once; the pool drops the
        connection."""
        with self._in_use_lock:
            conn = self._in_use
            if conn is None or conn.closed:
                return
            try:
                with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
                    sock.shutdown(socket.SHUT_RDWR)
            except (OSError, psycopg.Error):  # closed meanwhile: the call has ended
                pass

    def settle(self, purchase: Any) -> Receipt:
        """After an attempt that may have applied, the payment taken back: its key found
        (``already_applied``, the first receipt) or, absent, inserted voided in the same
        statement (``voided``): the primary key orders it against any attempt still running,
        which then finds it voided and applies nothing."""
        return self._transaction(self._settle, purchase)

    def _transaction(self, body: Any, purchase: Any) -> Receipt:
        deadline = time.monotonic() + self.timeout
        stage = "connecting"
        try:
            with self.pool().connection(timeout=self.timeout * CONNECT_SHARE) as conn:
                stage = "applying"
                with self._using(conn), conn.transaction():
                    receipt = body(conn, purchase, deadline)
                    stage = "committing"
        except PoolTimeout as exc:
            why = f"postgresql: no connection within {self.timeout * CONNECT_SHARE:g} s"
            why += f": {self.connect_error}" if self.connect_error else ""
            raise TransientDownstreamError(masked(why, self.url), down=True, sent=False) from exc
        except psycopg.Error as exc:
            raise failure(exc, stage == "committing", self.url) from exc
        except FulfilmentError:  # the effect's own word (workers/api.py)
            raise
        except Exception as exc:  # the effect's bug: rolled back, nothing applied
            effect = self.effect if body == self._apply else None  # a settlement runs none
            said = f"{type(exc).__name__}: {exc}"
            if effect is not None:  # its traceback logged, masked as the error is
                said = effect.raised(exc, purchase, password_parts(self.url))
            why = f"postgresql: the effect raised {said}"
            raise TransientDownstreamError(masked(why, self.url)) from exc
        return receipt

    def _apply(self, conn: psycopg.Connection, call: Any, deadline: float) -> Receipt:
        params = self._keyed(conn, call, deadline)
        key = {"idempotency_key": params["idempotency_key"]}
        if conn.execute(_INSERT_KEY, params).fetchone() is None:
            first = conn.execute(_FIRST_RECEIPT, key).fetchone()
            if first and first[1]:
                raise PermanentDownstreamError(VOIDED)
            return {"outcome": "already_applied", "receipt": first[0] if first else None}
        receipt = self.effect.run(conn, call) if self.effect is not None else {}
        conn.execute(_STORE_RECEIPT, {**key, "receipt": Jsonb(receipt)})
        return {"outcome": "applied", "receipt": receipt}

    def _settle(self, conn: psycopg.Connection, call: Any, deadline: float) -> Receipt:
        params = self._keyed(conn, call, deadline)
        if conn.execute(_VOID_KEY, params).fetchone() is not None:
            return {"outcome": "voided"}
        first = conn.execute(_FIRST_RECEIPT, params).fetchone()
        if first and first[1]:  # voided by a settlement before (its answer lost)
            return {"outcome": "voided"}
        return {"outcome": "already_applied", "receipt": first[0] if first else None}

    def _keyed(self, conn: psycopg.Connection, call: Any, deadline: float) -> dict[str, Any]:
        """The deadline set in the transaction; the key's parameters."""
        left_ms = max(1, int((deadline - time.monotonic()) * DATABASE_SHARE * 1000))
        # lock_timeout a little shorter: a statement waiting on a lock says so
        conn.execute(_SET_DEADLINE, {"ms": str(left_ms), "lock_ms": str(max(1, left_ms * 9 // 10))})
        p = sql_params(call)
        return {k: p[k] for k in ("idempotency_key", "payment_key", "token")}


def failure(exc: psycopg.Error, committing: bool, url: str) -> FulfilmentError:
    """What a database error means for the payment and for the breaker."""
    state = exc.sqlstate or ""
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    why = masked(f"postgresql: {type(exc).__name__} {state}: {first_line}".strip(), url)
    # No SQLSTATE on an OperationalError: libpq lost the connection (reset, EOF, refused).
    lost = not state and isinstance(exc, psycopg.OperationalError)
    down = lost or state.startswith(DOWN_STATES)
    if committing and (not state or down):  # COMMIT sent, no answer (or the server going
        # away): replay-safe, a re-run finds the key if it took. An error COMMIT answered
        # (a deferred constraint, a serialization failure) rolled it back: said for what it is.
        return AmbiguousDownstreamError(why, down=down)
    if down:
        return TransientDownstreamError(why, down=True)
    if state.startswith(RETRY_STATES):
        return TransientDownstreamError(why)
    if state.startswith(EFFECT_STATES):
        return PermanentDownstreamError(why)
    return TransientDownstreamError(why)
