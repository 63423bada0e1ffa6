"""What a setting may hold. Each kind turns the text of an environment variable into the
value the code uses (a number, a tuple of secrets, a tuple of networks, an :class:`ActionSpec`)
or raises :class:`Invalid`, and says in words what is allowed. ledger/setting_fields.py
declares and reads settings with them. Standard library and ledger/limits.py only:
gunicorn's master checks the settings before it forks (gunicorn.conf.py), when nothing
else may be imported yet.

Numbers are ASCII: a digit is 0-9, never another script's digit or a superscript (which
``str.isdigit`` and ``float`` accept). A duration (a kind whose unit is seconds or days) is
at most MAX_DURATION_SECONDS or MAX_DURATION_DAYS, what Redis, Lua and the timers accept.
A list is comma-separated; an empty item between commas is refused (it would shift every
later position), trailing commas and spaces around items are dropped.
"""

import ipaddress
import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from ledger import limits

SECONDS = "seconds"
CEILINGS = {
    SECONDS: (limits.MAX_DURATION_SECONDS, "ten years"),
    "days": (limits.MAX_DURATION_DAYS, "100 years"),
}
"""The longest duration of each unit, and how it reads."""

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_NAME = re.compile(r"[A-Za-z0-9_.:-]+")
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
DIGITS = re.compile(r"[0-9]+")
HOST = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]")
WIDEST = 18
"""Significant digits a whole number read here has at most: more is past every ceiling
(Python refuses to convert more than 4,300 digits at all, with a ValueError of its own)."""

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Invalid(ValueError):
    """Not a value of its kind: the message says what is wrong when the kind's own
    description does not (``database 99 is out of range``), else it is empty."""


def spelled(value: object) -> str:
    """A value as the environment spells it (``true``, ``a,b``, ``10`` for 10.0)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, tuple | list):
        return ",".join(spelled(item) for item in value)
    return str(value)


@dataclass(frozen=True)
class Kind:
    parse: Callable[[str], Any]
    """The value for this text; raises Invalid."""
    allowed: str
    """What is allowed, in words (``a whole number from 1 to 1000``)."""
    spell: Callable[[Any], str] = spelled
    """A value as the environment spells it (parse's inverse, for overrides and docs)."""


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


def digits_value(digits: str) -> int | None:
    """The value of ASCII ``digits`` (a sign allowed), or None when it has more than WIDEST
    significant digits."""
    text = digits.strip()
    significant = text.lstrip("+-").lstrip("0") or "0"
    sign = "-" if text.startswith("-") else ""
    return int(sign + significant) if len(significant) <= WIDEST else None


def whole(low: int, high: int | None = None, unit: str = "", note: str = "") -> Kind:
    """A whole number within ``low``..``high``; a duration without ``high``: at most its
    unit's ceiling. Every whole number has a ceiling: the Lua scripts take numbers as
    doubles, and refuse one past them mid-job."""
    allowed = f"a whole number{f' of {unit}' if unit else ''}, {_range(low, high, False)}{note}"
    most, cap = _ceiling(unit, high)
    if most is None:
        raise TypeError(f"a whole number{f' of {unit}' if unit else ''} needs a ceiling")

    def parse(text: str) -> int:
        _ascii(text)
        if not _WHOLE.fullmatch(text.strip()):
            raise Invalid()
        value = digits_value(text)
        if value is None or value < low or value > most:
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


MILLISECOND = 0.001


def milliseconds(high: float | None = None, off: str = "") -> Kind:
    """Seconds that reach Redis or a Lua script in whole milliseconds (``int(s * 1000)``):
    at least one millisecond, since a shorter time arrives as 0 ms, which there means
    something else or is refused mid-job (WAIT's 0 waits for ever, gate.lua refuses a 0 ms
    cool-down). ``off``: 0 is allowed too, and means that."""
    if not off:
        return number(MILLISECOND, high, SECONDS)
    any_length = number(0, high, SECONDS)

    def parse(text: str) -> float:
        value = any_length.parse(text)
        if 0 < value < MILLISECOND:
            raise Invalid("under a millisecond")
        return value

    cap = _ceiling(SECONDS, high)[1]
    allowed = f"a number of seconds, 0 ({off}) or {_range(MILLISECOND, high, False)}{cap}"
    return Kind(parse, allowed)


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


def _matching(pattern: re.Pattern[str], allowed: str) -> Kind:
    def parse(text: str) -> str:
        if not pattern.fullmatch(text):
            raise Invalid()
        return text

    return Kind(parse, allowed)


def name() -> Kind:
    """A name such as an RQ queue's: letters, digits and ``_.:-``."""
    return _matching(_NAME, "a name of letters, digits and _ . : -")


def host() -> Kind:
    """A host to listen on: a name, an IPv4 address or a bracketed IPv6 one."""
    return _matching(HOST, "a host name or address (127.0.0.1, 0.0.0.0, [::])")


def _items(text: str) -> list[str]:
    """Comma-separated items; an empty one in the middle would shift every later position."""
    items = [item.strip() for item in text.split(",")]
    while items and not items[-1]:
        items.pop()
    if any(not item for item in items):
        raise Invalid("an empty item between commas")
    return items


def _item(item: str, *_: int) -> str:
    return item


def listed(
    allowed: str,
    each: Callable[[str, int, int], Any] = _item,
    spell: Callable[[Any], str] = spelled,
) -> Kind:
    """Comma-separated items as a tuple, each turned into its value by ``each(item,
    position, count)``, which raises Invalid."""

    def parse(text: str) -> tuple[Any, ...]:
        items = _items(text)
        return tuple(each(item, n, len(items)) for n, item in enumerate(items, 1))

    return Kind(parse, allowed, spell)


def _network(item: str, *_: int) -> Network:
    try:
        return ipaddress.ip_network(item, strict=False)
    except ValueError:
        raise Invalid(f"{item} is not an address or network") from None


def networks() -> Kind:
    """IP addresses or networks (``10.0.0.0/8``, ``::1``), as networks."""
    return listed("IP addresses or networks, comma-separated (10.0.0.0/8,192.168.1.7)", _network)


def event_types(known: Collection[str]) -> Kind:
    """Event types, each one of ``known``; at least one."""

    def parse(text: str) -> tuple[str, ...]:
        items = listed("").parse(text)
        unknown = [item for item in items if item not in known]
        if unknown or not items:
            raise Invalid(f"{', '.join(unknown)} cannot mean paid" if unknown else "")
        return items

    return Kind(parse, "one or more of " + ", ".join(sorted(known)))


def sql_statement() -> Kind:
    """One SQL statement, or ``@path`` of a file holding it (checked by the database itself
    when a worker starts)."""

    def parse(text: str) -> str:
        if text.strip() in ("", "@"):
            raise Invalid("no statement and no file after @")
        return text

    return Kind(parse, "one SQL statement, or @path of a file holding it")


def text() -> Kind:
    """Any text (a setting only its own program interprets)."""
    return Kind(lambda value: value, "any text")
