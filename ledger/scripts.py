"""The Lua library: each script runs as the constants of ``keys``, ``lua/prelude.lua`` and
its own file, and is called with its KEYS and ARGV by name.

A script names its KEYS and ARGV once, at its top (``local ARG, ARGC = named(ARGV, 'a',
'b')``); :class:`Script` reads those names, so a caller passes ``{"a": ..., "b": ...}`` and
the order lives in one place.
"""

import re
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from redis import Redis

from ledger import keys

_NAMED = re.compile(r"^local \w+(?:, \w+)? = named\((KEYS|ARGV),([^)]*)\)", re.MULTILINE)


def source(name: str, clock_key: str = "") -> str:
    """The text Redis runs for script ``name``: the constants, the prelude, the script
    (``clock_key``: see :func:`keys.lua_constants`; tests only)."""
    lua = resources.files("ledger").joinpath("lua")
    parts = (lua.joinpath(f).read_text() for f in ("prelude.lua", f"{name}.lua"))
    return "\n".join([keys.lua_constants(clock_key), *parts])


def declared(text: str, kind: str) -> tuple[str, ...]:
    """The names a script gives its KEYS or ARGV (none when it takes none)."""
    for found, names in _NAMED.findall(text):
        if found == kind:
            return tuple(re.findall(r"'(\w+)'", names))
    return ()


class Script:
    """One ledger script, registered once per client and called with named values."""

    def __init__(self, redis: Redis, name: str, clock_key: str = "") -> None:
        text = source(name, clock_key)
        self.name = name
        self.redis = redis
        self.key_names = declared(text, "KEYS")
        self.arg_names = declared(text, "ARGV")
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
        return self.run(key_list, [*arg_list, *extra])

    def run(self, keys: list[str], args: list[Any], client: Any = None) -> Any:
        """Run it with positional KEYS and ARGV, as Redis sees them; ``client``: a pipeline
        to queue it on (the script is loaded first if that server lacks it)."""
        return self.registered(keys=keys, args=args, client=client)


def _exactly(script: str, what: str, names: tuple[str, ...], given: Mapping[str, object]) -> None:
    if set(given) != set(names):
        raise TypeError(f"{script} takes the {what} {names}, not {tuple(given)}")
