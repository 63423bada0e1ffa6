"""REDIS_URL as redis-py takes it. redis-py passes each query parameter of the URL to its
connection as a keyword, so one it does not take (``?ssl=true``) or a value it cannot read
(``?socket_timeout=abc``) fails only on connecting, with a traceback; asking redis-py
itself at start-up names the setting instead (ledger/settings.py's rules).

gunicorn's master checks the settings before it forks, and must not import redis-py: gevent
patches ssl in each worker, and the ssl names redis-py's asyncio module imported before
that would stay unpatched (a MonkeyPatchWarning in every worker). A process that has not
imported redis-py asks a child process instead; a URL without parameters needs no asking.
"""

import inspect
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

ASK_IN_CHILD = (
    "import sys; from ledger.redis_url import refusal_in_this_process as r; "
    "print(r(sys.stdin.read()) or '', end='')"
)
CHILD_SECONDS = 60


def redis_py_refusal(url: str) -> str | None:
    """Why redis-py cannot connect with ``url`` as given (never its password), else None."""
    if not urlsplit(url.strip()).query:
        return None
    if "redis" in sys.modules:
        return refusal_in_this_process(url)
    try:
        asked = subprocess.run(  # the URL on stdin: the command line is visible to every user
            [sys.executable, "-c", ASK_IN_CHILD],
            input=url,
            capture_output=True,
            text=True,
            timeout=CHILD_SECONDS,
            cwd=Path(__file__).resolve().parents[1],
            check=False,
        )
    except (subprocess.TimeoutExpired, OSError) as exc:
        return f"redis-py could not be asked to read it: {type(exc).__name__}"
    if asked.returncode:
        last = (asked.stderr.strip().splitlines() or ["no output"])[-1]
        return f"redis-py could not be asked to read it: {last}"
    return asked.stdout or None


def refusal_in_this_process(url: str) -> str | None:
    """:func:`redis_py_refusal`, importing redis-py here."""
    from redis import BlockingConnectionPool
    from redis.connection import Connection, parse_url
    from redis.exceptions import RedisError

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
