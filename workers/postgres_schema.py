"""The PostgreSQL action's own table in the user's database, made by ``webhook-ledger
downstream migrate`` (never at a worker's start), and the checks a worker makes before its
first job: the database reachable with these credentials, the table there, FULFILMENT_SQL
accepted by the server (planned with EXPLAIN in a transaction rolled back: never run).

One row per idempotency key whose effect committed; the row and the effect commit together.
A payment's fulfilment is ``fulfil:<payment key>``; with REVERSAL_ACTION on the same
database its reversals (``reverse:…``) and a fulfilment again after a dispute won
(``refulfil:…``) are rows of their own::

    idempotency_key text PRIMARY KEY   -- fulfil:<payment key>, the same for every attempt
    payment_key     text NOT NULL
    token           bigint NOT NULL    -- the fencing token of the attempt that applied it
    receipt         jsonb              -- what the effect returned; a re-run answers it
    applied_at      timestamptz NOT NULL DEFAULT now()
    voided_at       timestamptz        -- set: no effect, the key voided by a settlement

A settlement (a payment taken back after an attempt that may have applied) inserts the key
with ``voided_at`` when no effect holds it: the primary key then decides, against any late
attempt, whether the effect applied (docs/REVERSAL.md).
"""

import re

import psycopg

from ledger.redact import url_passwords, without
from workers.effects import Effect, sample_for, sql_params

TABLE = "webhook_ledger_effects"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    idempotency_key text PRIMARY KEY,
    payment_key text NOT NULL,
    token bigint NOT NULL,
    receipt jsonb,
    applied_at timestamptz NOT NULL DEFAULT now(),
    voided_at timestamptz
)
"""
ADDED_COLUMNS = {"voided_at": "timestamptz"}
"""Columns a table made before them lacks: ``migrate`` adds them."""
MIGRATE_LOCK = 0x7765626C  # 'webl': two migrations at once wait for each other
CHECK_CONNECT_SECONDS = 5
EXPLAINED = "planned with EXPLAIN: one SELECT, INSERT, UPDATE, DELETE, MERGE or VALUES"


def masked(text: str, url: str) -> str:
    """``text`` (psycopg's words, which may quote a password as libpq read it) with URL
    credentials masked, and the URL's passwords (userinfo, ``?password=``) and each part of
    them between ``@ : / ? #`` wherever they appear: libpq splits a URL at its first ``@``,
    urllib at its last, so a password with an unencoded ``@`` is read by libpq as a
    password's start and a host's, quoted as such ("failed to resolve host ...")."""
    return without(text, password_parts(url))


_PASSWORD_SPLIT = re.compile(r"[@:/?#]")


def password_parts(url: str) -> list[str]:
    """The URL's passwords and their parts between ``@ : / ? #``, of MIN_MASKED characters
    or more, each once, the longest first (so a password is replaced before a part of it)."""
    found = url_passwords(url)
    found += [part for password in found for part in _PASSWORD_SPLIT.split(password)]
    return sorted({p for p in found if len(p) >= MIN_MASKED}, key=len, reverse=True)


MIN_MASKED = 3
"""A shorter password is not masked where it appears: it would mask bits of every word."""


class NotUtf8(Exception):
    """The database's encoding is not UTF8 (:func:`encoding_problem` says which)."""


def encoding_problem(conn: psycopg.Connection) -> str | None:
    """Why this database cannot hold the ledger's rows, or None: its encoding must be UTF8.
    Customer names, metadata and receipts are Unicode; on SQL_ASCII (``initdb`` with a C
    locale and no encoding) psycopg reads text as bytes, so no column would be found by name."""
    row = conn.execute("SELECT current_setting('server_encoding')").fetchone()
    value = row[0] if row else ""
    encoding = value.decode() if isinstance(value, bytes) else str(value)
    if encoding == "UTF8":
        return None
    return (
        f"the database's encoding is {encoding}, not UTF8: make it with createdb --encoding=UTF8"
        " --template=template0 (customer names, metadata and receipts are Unicode)"
    )


def migrate(url: str) -> str:
    """Create the table when it is missing, or add the columns it lacks (idempotent); says
    which: ``created``, ``added <columns>`` or ``already there``. Raises :class:`NotUtf8`
    on a database that is not UTF8."""
    with psycopg.connect(url, connect_timeout=CHECK_CONNECT_SECONDS) as conn:
        if why := encoding_problem(conn):
            raise NotUtf8(why)
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
        present = conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()
        if present and present[0] is not None:
            lacking = _missing_columns(conn)
            for name in lacking:
                conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN {name} {ADDED_COLUMNS[name]}")
            return f"added {', '.join(lacking)}" if lacking else "already there"
        conn.execute(SCHEMA)
    return "created"


def _missing_columns(conn: psycopg.Connection) -> list[str]:
    found = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
        " AND NOT attisdropped",
        (TABLE,),
    ).fetchall()
    have = {row[0] for row in found}
    return [name for name in ADDED_COLUMNS if name not in have]


def problem(
    url: str, effect: Effect | None, setting: str = "FULFILMENT_ACTION"
) -> tuple[str, str] | None:
    """Why the action ``setting`` names cannot run (the setting to change, what is wrong),
    or None."""
    try:
        conn = psycopg.connect(url, connect_timeout=CHECK_CONNECT_SECONDS)
    except psycopg.Error as exc:
        return setting, masked(f"cannot connect: {_first_line(exc)}", url)
    try:
        with conn:
            if why := encoding_problem(conn):
                return setting, why
            found = conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()
            if not found or found[0] is None:
                why = f"the table {TABLE} is missing: run 'webhook-ledger downstream migrate'"
                return setting, why
            lacking = _missing_columns(conn)
            if lacking:
                why = f"the table {TABLE} lacks {', '.join(lacking)}: run 'webhook-ledger"
                return setting, why + " downstream migrate'"
            conn.rollback()
            if effect is not None and effect.sql:
                try:
                    # Binary results force the extended protocol, which refuses two
                    # statements (the simple one would run the second: never here).
                    explain = "EXPLAIN " + effect.sql
                    conn.cursor().execute(explain, sql_params(sample_for(effect)), binary=True)
                    # A payment sends its values as text of no declared type: PREPARE
                    # parses it so (EXPLAIN types them), never running it.
                    prepare = "PREPARE ledger_effect_check AS " + numbered(effect.sql)
                    conn.cursor().execute(prepare.encode(), binary=True)
                except psycopg.Error as exc:
                    why = f"PostgreSQL refuses it ({EXPLAINED}): {_first_line(exc)}"
                    return effect.setting, masked(why, url)
                finally:
                    conn.rollback()
    except psycopg.Error as exc:
        return setting, masked(_first_line(exc), url)
    return None


def numbered(sql: str) -> str:
    """``sql`` with psycopg's ``%(name)s`` placeholders as PostgreSQL's ``$1``..., one
    number a name, and ``%%`` as ``%``: how psycopg sends it."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        if match[0] == "%%":
            return "%"
        return f"${names.setdefault(match[1], len(names) + 1)}"

    return re.sub(r"%%|%\((\w+)\)s", number, sql)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
