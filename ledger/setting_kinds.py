"""What a setting may hold. Each kind turns the text of an environment variable into a
value, or raises :class:`Invalid` saying in words what is allowed; ledger/declared.py reads
the settings declared with them. Standard library and ledger.defaults' constants only:
gunicorn's master checks the settings before it forks (gunicorn.conf.py), when nothing else
may be imported yet.

Numbers are ASCII: a digit is 0-9, never another script's digit or a superscript (which
``str.isdigit`` and ``float`` accept). A duration (a kind whose unit is seconds or days) is
at most MAX_DURATION_SECONDS or MAX_DURATION_DAYS, what Redis, Lua and the timers accept.
"""

import ipaddress
import keyword
import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from urllib.parse import SplitResult, parse_qs, urlsplit

from ledger import defaults

REDIS_DATABASES = 16
"""Redis's default ``databases 16`` (config/redis.conf keeps it): valid indexes 0-15."""

_SECRET_PREFIX = "whsec_"
_API_KEY_PREFIXES = ("sk_", "rk_")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_NAME = re.compile(r"[A-Za-z0-9_.:-]+")
_LABEL = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DIGITS = re.compile(r"[0-9]+")
CEILINGS = {
    "seconds": (defaults.MAX_DURATION_SECONDS, "ten years"),
    "days": (defaults.MAX_DURATION_DAYS, "100 years"),
}
"""The longest duration of each unit, and how it reads."""
_HOST = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]")


class Invalid(ValueError):
    """Not a value of its kind: the message says what is wrong when the kind's own
    description does not (``database 99 is out of range``), else it is empty."""


@dataclass(frozen=True)
class Kind:
    parse: Callable[[str], object]
    """The value for this text; raises Invalid."""
    allowed: str
    """What is allowed, in words (``a whole number from 1 to 1000``)."""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _range(low: float, high: float | None, above: bool) -> str:
    low_s = _num(low)
    if high is not None:
        return f"above {low_s} up to {_num(high)}" if above else f"from {low_s} to {_num(high)}"
    return f"above {low_s}" if above else f"{low_s} or more"


def _ceiling(unit: str, high: float | None) -> tuple[float | None, str]:
    """The upper bound of a kind in ``unit`` and the words it adds: a duration's ceiling."""
    if high is not None or unit not in CEILINGS:
        return high, ""
    most, words = CEILINGS[unit]
    return most, f", at most {most} ({words})"


def _ascii(text: str) -> None:
    """Refuse digits of other scripts, superscripts and the like, saying so."""
    if not text.isascii():
        raise Invalid("only the ASCII digits 0-9 make a number")


def whole(low: int, high: int | None = None, unit: str = "", note: str = "") -> Kind:
    """A whole number within ``low``..``high`` (a duration: at most its unit's ceiling)."""
    allowed = f"a whole number{f' of {unit}' if unit else ''}, {_range(low, high, False)}{note}"
    most, cap = _ceiling(unit, high)

    def parse(text: str) -> int:
        _ascii(text)
        if not _WHOLE.fullmatch(text.strip()):
            raise Invalid()
        value = int(text)
        if value < low or (most is not None and value > most):
            raise Invalid()
        return value

    return Kind(parse, allowed + cap)


def number(
    low: float, high: float | None = None, unit: str = "", above: bool = False, note: str = ""
) -> Kind:
    """A finite decimal number within ``low``..``high`` (``above``: strictly more than low;
    a duration: at most its unit's ceiling)."""
    allowed = f"a number{f' of {unit}' if unit else ''}, {_range(low, high, above)}{note}"
    most, cap = _ceiling(unit, high)

    def parse(text: str) -> float:
        _ascii(text)
        if not _DECIMAL.fullmatch(text.strip()):  # float() also takes 1_0, inf, nan
            raise Invalid()
        value = float(text.strip())
        if not math.isfinite(value) or value < low or (above and value == low):
            raise Invalid()
        if most is not None and value > most:
            raise Invalid()
        return value

    return Kind(parse, allowed + cap)


def boolean() -> Kind:
    def parse(text: str) -> bool:
        word = text.strip().lower()
        if word not in _TRUE + _FALSE:
            raise Invalid()
        return word in _TRUE

    return Kind(parse, "true or false (or 1/0, yes/no, on/off)")


def choice(*options: str) -> Kind:
    def parse(text: str) -> str:
        if text.strip().lower() not in options:
            raise Invalid()
        return text.strip().lower()

    return Kind(parse, "one of " + ", ".join(options))


def name() -> Kind:
    """A name such as an RQ queue's: letters, digits and ``_.:-``."""

    def parse(text: str) -> str:
        if not _NAME.fullmatch(text):
            raise Invalid()
        return text

    return Kind(parse, "a name of letters, digits and _ . : -")


def host() -> Kind:
    """A host to listen on: a name, an IPv4 address or a bracketed IPv6 one."""

    def parse(text: str) -> str:
        if not _HOST.fullmatch(text):
            raise Invalid()
        return text

    return Kind(parse, "a host name or address (127.0.0.1, 0.0.0.0, [::])")


def host_ports() -> Kind:
    """Comma-separated ``host:port`` addresses (Redis Sentinels)."""

    def parse(text: str) -> str:
        for item in _items(text):
            host_part, _, port = item.rpartition(":")
            if not (_HOST.fullmatch(host_part) and _DIGITS.fullmatch(port)) or not (
                0 < int(port) < 65536
            ):
                raise Invalid(f"{item or '(empty)'} is not host:port")
        return text

    return Kind(parse, "host:port[,host:port...] (port 1-65535)")


def networks() -> Kind:
    """Comma-separated IP addresses or networks (``10.0.0.0/8``, ``::1``)."""

    def parse(text: str) -> str:
        for item in _items(text):
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise Invalid(f"{item} is not an address or network") from None
        return text

    return Kind(parse, "IP addresses or networks, comma-separated (10.0.0.0/8,192.168.1.7)")


def token() -> Kind:
    """A bearer token or password: any printable text without surrounding spaces."""

    def parse(text: str) -> str:
        if text != text.strip():
            raise Invalid("it has leading or trailing spaces")
        if not text.isprintable():
            raise Invalid("it has control characters")
        return text

    return Kind(parse, "a token without spaces around it")


def tokens() -> Kind:
    """One or more bearer tokens, comma-separated (token()'s rules for each)."""

    def parse(text: str) -> str:
        token().parse(text)
        _items(text)
        return text

    return Kind(parse, "one or more tokens, comma-separated, without spaces around them")


def token_labels() -> Kind:
    def parse(text: str) -> str:
        for label in _items(text):
            if not _LABEL.fullmatch(label):
                raise Invalid(f"label {label!r} has a character other than A-Z a-z 0-9 _ . @ -")
        return text

    return Kind(parse, "one label per token, comma-separated, each of A-Z a-z 0-9 _ . @ -")


def _items(text: str) -> list[str]:
    """Comma-separated items; an empty one in the middle would shift every later position."""
    items = [item.strip() for item in text.split(",")]
    while items and not items[-1]:
        items.pop()
    if any(not item for item in items):
        raise Invalid("an empty item between commas")
    return items


def webhook_secrets() -> Kind:
    def parse(text: str) -> str:
        items = _items(text)
        for position, item in enumerate(items, 1):
            if not item.startswith(_SECRET_PREFIX) or item == _SECRET_PREFIX:
                what = (
                    "a Stripe API key, not a webhook signing secret"
                    if item.startswith(("sk_", "rk_", "pk_"))
                    else f"it does not start with {_SECRET_PREFIX}"
                )
                raise Invalid(f"secret {position} of {len(items)}: {what}")
        return text

    allowed = "one or more webhook signing secrets whsec_…, comma-separated"
    return Kind(parse, allowed + " (the endpoint's, from the Dashboard or 'stripe listen')")


def labels() -> Kind:
    def parse(text: str) -> str:
        for label in _items(text):
            if label.isdigit():
                raise Invalid(f"label {label} is a plain number")
        return text

    allowed = (
        "one label per secret, comma-separated, not plain numbers (the ledger recorded "
        "secrets by position before labels and shows those as numbers)"
    )
    return Kind(parse, allowed)


def event_types(known: Collection[str]) -> Kind:
    """Comma-separated event types, each one of ``known``."""

    def parse(text: str) -> tuple[str, ...]:
        items = _items(text)
        unknown = [item for item in items if item not in known]
        if unknown or not items:
            raise Invalid(f"{', '.join(unknown)} cannot mean paid" if unknown else "")
        return tuple(items)

    return Kind(parse, "one or more of " + ", ".join(sorted(known)))


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
        if db and not _DIGITS.fullmatch(db):
            raise Invalid(f"database {db} is not a number")
        if db and int(db) >= databases:
            raise Invalid(f"database {db} is out of range")
        return text

    return Kind(parse, allowed)


def _split_url(text: str) -> SplitResult:
    """urllib's split, with a port that is not a number (or out of range) refused."""
    try:
        parts = urlsplit(text.strip())
        _ = parts.port
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    return parts


def http_url() -> Kind:
    def parse(text: str) -> str:
        parts = _split_url(text)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise Invalid()
        return text

    return Kind(parse, "an http:// or https:// URL with a host")


def fulfilment_action() -> Kind:
    allowed = "sqlite:///PATH, http(s)://URL or module:function"

    def parse(text: str) -> str:
        if text.startswith("sqlite:///"):
            if not text.removeprefix("sqlite:///"):
                raise Invalid("no file path after sqlite:///")
        elif text.startswith(("http://", "https://")):
            http_url().parse(text)
        elif not _dotted_callable(text):
            raise Invalid()
        return text

    return Kind(parse, allowed)


def _dotted_callable(text: str) -> bool:
    module, colon, function = text.partition(":")
    parts = [*module.split("."), *function.split(".")]
    return bool(colon) and all(p.isidentifier() and not keyword.iskeyword(p) for p in parts)


def api_key() -> Kind:
    def parse(text: str) -> str:
        if not text.startswith(_API_KEY_PREFIXES) or text != text.strip():
            what = "a webhook signing secret, not an API key" if text.startswith("whsec_") else ""
            raise Invalid(what)
        return text

    return Kind(parse, "a Stripe secret or restricted API key (sk_… or rk_…)")


def text() -> Kind:
    """Any text (a setting only its own program interprets)."""
    return Kind(lambda value: value, "any text")
