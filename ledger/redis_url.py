"""REDIS_URL as redis-py takes it. redis-py passes each query parameter of the URL to its
connection as a keyword, so one it does not take (``?ssl=true``) or a value it cannot read
(``?socket_timeout=abc``) fails only on connecting, with a traceback; asking redis-py
itself at start-up names the setting instead (ledger/settings.py's rules). A value redis-py
reads but the server or the socket then refuses (``?socket_timeout=-1``, a ``client_name``
with a space) is checked here too, as is a keyword redis-py takes only as a Python object
(``retry``, ``socket_type``), which a URL's text can never be: each would fail every command.

gunicorn's master checks the settings before it forks, and must not import redis-py: gevent
patches ssl in each worker, and the ssl names redis-py's asyncio module imported before
that would stay unpatched (a MonkeyPatchWarning in every worker). A process that has not
imported redis-py asks a child process instead; a URL without parameters needs no asking.
"""

import codecs
import inspect
import math
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from ledger import limits

ASK_IN_CHILD = (
    "import sys; from ledger.redis_url import refusal_in_this_process as r; "
    "print(r(sys.stdin.read()) or '', end='')"
)
CHILD_SECONDS = 60
AS_TEXT = frozenset(
    {
        *("client_name", "username", "password", "lib_name", "lib_version"),
        *("encoding", "encoding_errors", "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs"),
        *("ssl_ca_certs", "ssl_ca_path", "ssl_ca_data", "ssl_password", "ssl_ciphers"),
        "ssl_ocsp_expected_cert",
    }
)
"""The keywords redis-py takes as text, as a URL's query gives them; it reads those of its
URL_QUERY_ARGUMENT_PARSERS itself (all but ``retry_on_error``, which wants exception
classes). Any other keyword wants a Python object (``retry``) or a bool that the text
``false`` would turn true (``decode_responses``)."""
SECONDS = ("socket_timeout", "socket_connect_timeout", "timeout")
"""Seconds redis-py waits: for a reply, to connect, for a free connection of the pool."""
WHOLE = {
    "socket_read_size": (1, 64 << 20),
    "max_connections": (1, 10_000),
    "health_check_interval": (0, limits.MAX_DURATION_SECONDS),
}
"""Whole-number keywords and their bounds (REDIS_MAX_CONNECTIONS's for the pool's size)."""


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
    from redis.connection import URL_QUERY_ARGUMENT_PARSERS, Connection, parse_url
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
    query = set(parse_qs(urlsplit(url.strip()).query))
    readable = AS_TEXT | set(URL_QUERY_ARGUMENT_PARSERS) - {"retry_on_error"}
    objects = sorted(query & set(options) - readable)
    if objects:
        plural = "s" if len(objects) > 1 else ""
        return (
            f"redis-py cannot take parameter{plural} {', '.join(objects)} from a URL's text "
            "(it wants a Python value there)"
        )
    wrong = value_refusal(options)
    if wrong:
        return f"redis-py cannot use it: {wrong}"
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


def value_refusal(options: Mapping[str, object]) -> str | None:
    """What is wrong with a value redis-py read from the URL but the socket, the pool or the
    server would refuse on every command (never the value itself), else None."""
    for name in SECONDS:
        value = options.get(name)
        if isinstance(value, float) and not (
            math.isfinite(value) and 0 < value <= limits.MAX_DURATION_SECONDS
        ):
            most = limits.MAX_DURATION_SECONDS
            return f"{name} must be a number of seconds above 0, at most {most}"
    for name, (low, high) in WHOLE.items():
        value = options.get(name)
        if isinstance(value, int) and not low <= value <= high:
            return f"{name} must be a whole number from {low} to {high}"
    for name in ("client_name", "lib_name", "lib_version"):
        value = options.get(name)
        if isinstance(value, str) and not all("!" <= char <= "~" for char in value):
            return f"{name} must be printable ASCII without spaces (Redis refuses others)"
    return _codec_refusal(options) or _tls_refusal(options)


def _codec_refusal(options: Mapping[str, object]) -> str | None:
    try:
        codecs.lookup(str(options.get("encoding", "utf-8")))
    except LookupError:
        return "encoding must name a Python codec (utf-8)"
    try:
        codecs.lookup_error(str(options.get("encoding_errors", "strict")))
    except LookupError:
        return "encoding_errors must name a Python error handler (strict, replace)"
    return None


def _tls_refusal(options: Mapping[str, object]) -> str | None:
    import ssl

    version = options.get("ssl_min_version")
    if version is not None and version not in {v.value for v in ssl.TLSVersion}:
        known = ", ".join(f"{v.value} ({v.name})" for v in ssl.TLSVersion if v.value > 0)
        return f"ssl_min_version must be one of {known}"
    return None
