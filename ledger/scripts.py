"""The Lua library: each script runs as the constants of ``keys``, its name (``SCRIPT``),
``lua/prelude.lua`` (with the files of :data:`TAKING_BACK` and ``lua/attempts.lua`` for
the scripts that need them) and its own file, and is called with its KEYS and ARGV by name.

The scripts of :data:`FUNCTIONS` run as Redis Functions: the same text, wrapped as a library
(:func:`library`), is loaded once per server (``FUNCTION LOAD``) and called with ``FCALL``,
so its constants and prelude are built once, not on every call as ``EVALSHA`` runs a
script's whole text. A server without the function (restarted without persistence, or a
replica promoted that lacks it) is given it and the call made again, as redis-py does for
``EVALSHA``'s ``NOSCRIPT``.

A script names its KEYS, ARGV and reply once, at its top (``local ARG, ARGC = named(ARGV,
'a', 'b')``, ``local reply = replies('verdict', 'state')``); :class:`Script` reads those
names, so a caller passes ``{"a": ..., "b": ...}``, gets the reply as its struct in
``ledger.replies``, and the order lives in one place.
"""

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import ResponseError

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


TAKING_BACK = ("refunds.lua", "take_back_steps.lua", "take_back.lua")
"""What a refund or dispute does to a payment, in this order after the prelude, for the
scripts that take a payment back or give it back: the attempt scripts and the intake's."""

TAKING_BACK_SCRIPTS = ATTEMPT_SCRIPTS | {"record_delivery"}

JSON_ARG_PARTS = ("json_args.lua",)
"""The JSON arguments of the scripts that write purchase fields, read and checked, last
before their own file."""

JSON_ARG_SCRIPTS = frozenset(("record_delivery", "keep_purchase"))


def source(name: str, clock_key: str = "") -> str:
    """The text Redis runs for script ``name``: the constants, the prelude (and the attempt
    helpers), the script (``clock_key``: see :func:`keys.lua_constants`; tests only)."""
    return "\n".join(_parts(name, clock_key))


def _parts(name: str, clock_key: str) -> tuple[str, str]:
    """What comes before the script's own file (constants, name, prelude), and that file."""
    lua = resources.files("ledger").joinpath("lua")
    files = (
        "prelude.lua",
        *(TAKING_BACK if name in TAKING_BACK_SCRIPTS else ()),
        *(("attempts.lua",) if name in ATTEMPT_SCRIPTS else ()),
        *(JSON_ARG_PARTS if name in JSON_ARG_SCRIPTS else ()),
    )
    shared = (lua.joinpath(f).read_text() for f in files)
    head = "\n".join([keys.lua_constants(clock_key), f"local SCRIPT = {name!r}", *shared])
    return head, lua.joinpath(f"{name}.lua").read_text()


FUNCTIONS = frozenset(("record_delivery",))
"""The scripts run as Redis Functions (``FCALL``) rather than ``EVALSHA``: the intake's, on
every delivery (docs/BENCHMARKS.md, "Intake against the peer")."""
MISSING_FUNCTION = "Function not found"
"""Redis's error for an ``FCALL`` of a function it does not have."""


def library(name: str, clock_key: str = "") -> tuple[str, str]:
    """The Redis Functions library serving script ``name`` and the function's name: the
    script's text (:func:`source`) with its KEYS and ARGV as locals set by each call, its own
    file as the body of a function. Both names end with a digest of the text, so two versions
    of the code (a rolling deploy, a test's clock key) each call their own."""
    head, own = _parts(name, clock_key)
    function = f"{name}_{hashlib.sha1((head + own).encode()).hexdigest()[:16]}"
    text = "\n".join(
        [
            f"#!lua name=wl_{function}",
            "local KEYS, ARGV",
            head,
            "local function run()",
            own,
            "end",
            f"redis.register_function('{function}', function(keys, args)",
            "  KEYS, ARGV = keys, args",
            "  return run()",
            "end)",
        ]
    )
    return text, function


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
        """The script as ``EVALSHA`` runs it (and tools that run its text, bench/)."""
        self.library, self.function = library(name, clock_key) if name in FUNCTIONS else ("", "")
        """The library and function ``FCALL`` runs instead, for the scripts of FUNCTIONS."""

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
        to queue it on (sent with :meth:`execute`, which loads it where it is missing)."""
        if not self.function:
            return self.registered(keys=keys, args=args, client=client)
        call = (self.function, len(keys), *keys, *args)
        if client is not None:  # a pipeline: only queued here
            return client.fcall(*call)
        try:
            return self.redis.fcall(*call)
        except ResponseError as exc:
            if not missing(exc):
                raise
        self.load()
        return self.redis.fcall(*call)

    def load(self, client: Any = None) -> None:
        """Give the server this script: its function (FUNCTION LOAD; one already there is
        kept), or the script for EVALSHA."""
        target = self.redis if client is None else client
        if not self.function:
            target.script_load(self.registered.script)
            return
        try:
            target.function_load(self.library)
        except ResponseError as exc:
            if "already exists" not in str(exc):  # another process loaded it first
                raise

    def execute(self, queue: Callable[[Pipeline], None]) -> list[Any]:
        """The replies of a pipeline that ``queue`` fills, this script's call among them;
        sent again once the function is loaded if the server lacked it (a missing function's
        FCALL runs nothing; the rest of the pipeline runs twice, so it must be safe to repeat,
        as WAIT is). redis-py loads a missing ``EVALSHA`` script itself before it sends a
        pipeline."""
        with self.redis.pipeline(transaction=False) as pipe:
            queue(pipe)
            try:
                return pipe.execute()
            except ResponseError as exc:
                if not (self.function and missing(exc)):
                    raise
        self.load()
        with self.redis.pipeline(transaction=False) as pipe:
            queue(pipe)
            return pipe.execute()


def missing(exc: ResponseError) -> bool:
    """Whether Redis refused an FCALL because it lacks the function."""
    return str(exc).endswith(MISSING_FUNCTION)  # a pipeline's error names the command first


def _exactly(script: str, what: str, names: tuple[str, ...], given: Mapping[str, object]) -> None:
    if set(given) != set(names):
        raise TypeError(f"{script} takes the {what} {names}, not {tuple(given)}")
