"""REDIS_URL as redis-py takes it. redis-py passes each query parameter of the URL to its
connection as a keyword, so one it does not take (``?ssl=true``) or a value it cannot read
(``?socket_timeout=abc``) fails only on connecting, with a traceback; asking redis-py
itself at start-up names the setting instead (ledger/settings.py's rules)."""

import inspect
from functools import cache

from redis import BlockingConnectionPool
from redis.connection import Connection, parse_url
from redis.exceptions import RedisError


def redis_py_refusal(url: str) -> str | None:
    """Why redis-py cannot connect with ``url`` as given (never its password), else None."""
    try:
        options = parse_url(url)
    except ValueError as exc:  # its message names the parameter, never the value
        return f"redis-py cannot use it: {exc}"
    connection_class = options.pop("connection_class", Connection)
    pooled = _keywords(BlockingConnectionPool)
    unknown = sorted(set(options) - _keywords(connection_class) - pooled)
    if unknown:
        tls = "; TLS: rediss://" if any(name.startswith("ssl") for name in unknown) else ""
        plural = "s" if len(unknown) > 1 else ""
        return f"redis-py takes no parameter{plural} {', '.join(unknown)} in it{tls}"
    try:  # builds it, connects nothing: some values are checked only here (protocol=5)
        connection_class(**{k: v for k, v in options.items() if k not in pooled})
    except (RedisError, TypeError, ValueError) as exc:
        return f"redis-py cannot use it: {exc}"
    return None


@cache
def _keywords(cls: type) -> frozenset[str]:
    """The keywords ``cls`` takes, its bases' included (each passes ``**kwargs`` on)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        for param in inspect.signature(init).parameters.values():
            if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                names.add(param.name)
    return frozenset(names - {"self"})
