"""What a URL, address or action setting may hold (ledger/setting_kinds.py's kinds):
REDIS_URL, REDIS_SENTINELS's host:port addresses, an http(s) URL, FULFILMENT_ACTION and
REVERSAL_ACTION (parsed into an :class:`ActionSpec`), a user's ``module:function``.
Standard library only, as setting_kinds.py: gunicorn's master checks the settings before it
forks.

A URL's text is never quoted back in an error: urllib's own messages quote the port it
read, which may be the start of a password.
"""

import keyword
from dataclasses import dataclass
from typing import Literal
from urllib.parse import SplitResult, parse_qs, urlsplit

from ledger.setting_kinds import DIGITS, HOST, Invalid, Kind, digits_value, listed

REDIS_DATABASES = 16
"""Redis's default ``databases 16`` (config/redis.conf keeps it): valid indexes 0-15."""


@dataclass(frozen=True)
class ActionSpec:
    """FULFILMENT_ACTION, parsed: the built-in SQLite downstream, the built-in PostgreSQL one
    (the user's own database), an http(s) URL or a user's ``module:function``."""

    scheme: Literal["sqlite", "postgresql", "http", "callable"]
    target: str
    """The SQLite file, the PostgreSQL or http(s) URL, or ``module:function``."""

    def __str__(self) -> str:
        return f"sqlite:///{self.target}" if self.scheme == "sqlite" else self.target


def redis_url(databases: int = REDIS_DATABASES) -> Kind:
    allowed = (
        f"redis://[user:password@]host[:port][/db] (db 0-{databases - 1}), "
        "rediss://… (TLS) or unix:///path/to/socket[?db=N]"
    )

    def parse(text: str) -> str:
        parts = _split_url(text)
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise Invalid(f"scheme {parts.scheme or '(none)'}")
        if parts.scheme == "unix":
            if not parts.path:
                raise Invalid("no socket path")
        elif not parts.hostname:
            raise Invalid("no host")
        query = parse_qs(parts.query)
        path_db = parts.path.strip("/") if parts.scheme != "unix" else ""
        db = query["db"][0] if "db" in query else path_db
        if db and not DIGITS.fullmatch(db):
            raise Invalid(f"database {db} is not a number")
        number = digits_value(db) if db else 0
        if number is None or number >= databases:
            shown = db if number is not None else f"of {len(db)} digits"
            raise Invalid(f"database {shown} is out of range")
        return text

    return Kind(parse, allowed)


def _split_url(text: str) -> SplitResult:
    """urllib's split, with a port that is not a number (or out of range) refused in words
    of our own: urllib's quote the port it read, which may be a password's start."""
    try:
        parts = urlsplit(text.strip())
    except ValueError:
        raise Invalid("it cannot be read as a URL (a [ or ] of an IPv6 host unmatched?)") from None
    try:
        _ = parts.port
    except ValueError:
        raise Invalid(
            "the port is not a number from 0 to 65535 (a password with / # ? must be "
            "percent-encoded)"
        ) from None
    return parts


def _http_url(text: str) -> str:
    parts = _split_url(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid()
    return text


def http_url() -> Kind:
    return Kind(_http_url, "an http:// or https:// URL with a host")


def parse_action(text: str) -> ActionSpec:
    """FULFILMENT_ACTION's text as an ActionSpec; raises Invalid."""
    if text.startswith("sqlite:///"):
        if not text.removeprefix("sqlite:///"):
            raise Invalid("no file path after sqlite:///")
        return ActionSpec("sqlite", text.removeprefix("sqlite:///"))
    if text.startswith(("postgresql://", "postgres://")):
        return ActionSpec("postgresql", _postgresql_url(text))
    if text.startswith(("http://", "https://")):
        return ActionSpec("http", _http_url(text))
    if _target(text):
        return ActionSpec("callable", text)
    raise Invalid()


def _postgresql_url(text: str) -> str:
    """libpq's URI form with a database: ``postgresql://user[:password]@host[:port]/db``.
    An ``@`` in the userinfo is refused: urllib splits at the last ``@``, libpq at the
    first, which makes the rest of the password the host it names in its error."""
    parts = _split_url(text)
    if "@" in parts.netloc.rpartition("@")[0]:
        raise Invalid(
            "an @ in the user name or password: percent-encode it as %40 "
            "(postgresql://user:pass%40word@host:port/db)"
        )
    if not parts.path.strip("/"):
        raise Invalid("no database after the host (postgresql://user@host:port/db)")
    return text


def _target(text: str) -> bool:
    """Whether ``text`` reads as ``module:function`` (dotted names, no keywords)."""
    module, colon, function = text.partition(":")
    parts = [*module.split("."), *function.split(".")]
    return bool(colon) and all(p.isidentifier() and not keyword.iskeyword(p) for p in parts)


def fulfilment_action() -> Kind:
    return Kind(
        parse_action,
        "sqlite:///PATH, postgresql://USER@HOST:PORT/DB, http(s)://URL or module:function",
    )


def python_target() -> Kind:
    """A user's ``module:function`` (imported by the process that calls it)."""

    def parse(text: str) -> str:
        if not _target(text.strip()):
            raise Invalid()
        return text.strip()

    return Kind(parse, "module:function (dotted names)")


def _host_port(item: str, position: int, count: int) -> tuple[str, int]:
    """One address; a wrong one is named by its position, never quoted: it may be a part of
    a password (``:pass,word@host:port``), which the masked value shows only masked."""
    host_part, _colon, port = item.rpartition(":")
    number = digits_value(port) if DIGITS.fullmatch(port) else None
    if not (HOST.fullmatch(host_part) and number and number < 65536):
        where = f"address {position} of {count}" if count > 1 else "it"
        raise Invalid(f"{where} is not host:port")
    return host_part.strip("[]"), number


def host_ports() -> Kind:
    """``host:port`` addresses (Redis Sentinels), as (host, port) pairs."""
    allowed = "host:port[,host:port...] (port 1-65535)"
    return listed(allowed, _host_port, lambda pairs: ",".join(_address(*p) for p in pairs))


def mask_host_ports(text: str) -> str:
    """``host:port`` addresses as a problem line shows them: whatever comes before an ``@``
    in an entry (``:password@host:port``, a password where none belongs) masked, as
    ledger/redact.py's mask_url masks a URL's userinfo; an entry before the last such one
    that is not host:port masked whole (a password may hold a comma)."""
    items = text.split(",")
    last = max((n for n, item in enumerate(items) if "@" in item), default=-1)
    shown = []
    for n, item in enumerate(items):
        if "@" in item:
            item = "***@" + item.rpartition("@")[2]
        elif n < last and item.strip() and not _is_host_port(item.strip()):
            item = "***"
        shown.append(item)
    return ",".join(shown)


def _is_host_port(item: str) -> bool:
    host_part, _colon, port = item.rpartition(":")
    return bool(HOST.fullmatch(host_part) and DIGITS.fullmatch(port))


def _address(host_part: str, port: int) -> str:
    return f"[{host_part}]:{port}" if ":" in host_part else f"{host_part}:{port}"
