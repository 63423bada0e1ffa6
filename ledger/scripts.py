"""The Lua library: each script runs as the constants of ``keys``, its name (``SCRIPT``),
``lua/prelude.lua`` (and ``lua/attempts.lua``) and its own file, and is called with its
KEYS and ARGV by name.

A script names its KEYS, ARGV and reply once, at its top (``local ARG, ARGC = named(ARGV,
'a', 'b')``, ``local reply = replies('verdict', 'state')``); :class:`Script` reads those
names, so a caller passes ``{"a": ..., "b": ...}``, gets the reply as its struct in
``ledger.replies``, and the order lives in one place.
"""

import re
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from redis import Redis

from ledger import keys, replies

_NAMED = re.compile(
    r"^local \w+(?:, \w+)? = (?:named\((KEYS|ARGV),|(replies)\()([^)]*)\)", re.MULTILINE
)


ATTEMPT_SCRIPTS = frozenset(
    ("start_attempt", "mark_calling", "finish_attempt", "recover", "operator", "breaker")
)
"""The scripts that also get ``lua/attempts.lua``, the helpers of a payment's attempts. The
others (the intake's among them) go without: every call builds each helper in its text
anew, which costs these about 2 µs of Redis time a call."""


def source(name: str, clock_key: str = "") -> str:
    """The text Redis runs for script ``name``: the constants, the prelude (and the attempt
    helpers), the script (``clock_key``: see :func:`keys.lua_constants`; tests only)."""
    lua = resources.files("ledger").joinpath("lua")
    files = ("prelude.lua", *(("attempts.lua",) if name in ATTEMPT_SCRIPTS else ()), f"{name}.lua")
    parts = (lua.joinpath(f).read_text() for f in files)
    return "\n".join([keys.lua_constants(clock_key), f"local SCRIPT = {name!r}", *parts])


def names_given(text: str, kind: str) -> tuple[str, ...]:
    """The names a script gives its ``KEYS``, ``ARGV`` or ``replies`` (none when it takes
    none or answers one value)."""
    for keys_or_args, reply, names in _NAMED.findall(text):
        if kind in (keys_or_args, reply):
            return tuple(re.findall(r"'(\w+)'", names))
    return ()


class Script:
    """One ledger script, registered once per client and called with named values."""

    def __init__(self, redis: Redis, name: str, clock_key: str = "") -> None:
        text = source(name, clock_key)
        self.name = name
        self.redis = redis
        self.key_names = names_given(text, "KEYS")
        self.arg_names = names_given(text, "ARGV")
        self.shape = replies.SHAPES.get(name)
        reply_names = names_given(text, "replies")
        if reply_names != (self.shape.__struct_fields__ if self.shape else ()):
            raise TypeError(f"{name} names its reply {reply_names}, unlike ledger.replies")
        self.registered = redis.register_script(text)

    def positional(
        self, keys: Mapping[str, str], args: Mapping[str, object]
    ) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV lists for these named values; every name must be given."""
        _exactly(self.name, "keys", self.key_names, keys)
        _exactly(self.name, "arguments", self.arg_names, args)
        return [keys[n] for n in self.key_names], [args[n] for n in self.arg_names]

    def __call__(
        self, keys: Mapping[str, str], args: Mapping[str, object], extra: Sequence[Any] = ()
    ) -> Any:
        """Run it; ``extra`` follows the named arguments (a captured RQ enqueue)."""
        key_list, arg_list = self.positional(keys, args)
        return self.read(self.run(key_list, [*arg_list, *extra]))

    def read(self, reply: Any) -> Any:
        """The reply as Redis gave it, as its struct (``ledger.replies``) if it has one."""
        return replies.read(self.shape, reply) if self.shape else reply

    def run(self, keys: list[str], args: list[Any], client: Any = None) -> Any:
        """Run it with positional KEYS and ARGV, as Redis sees them; ``client``: a pipeline
        to queue it on (the script is loaded first if that server lacks it)."""
        return self.registered(keys=keys, args=args, client=client)


def _exactly(script: str, what: str, names: tuple[str, ...], given: Mapping[str, object]) -> None:
    if set(given) != set(names):
        raise TypeError(f"{script} takes the {what} {names}, not {tuple(given)}")
