"""REDIS_URL's query parameters, checked by redis-py itself at start-up (ledger/redis_url.py):
one it cannot use is named in one line, never left to fail on connecting."""

import subprocess
import sys

import pytest

from ledger.settings import SettingsError, load
from tests.support.helpers import cli_ok, run_cli
from tests.support.processes import ROOT


def problems(env: dict[str, str]) -> list[str]:
    try:
        load(env)
    except SettingsError as exc:
        return exc.problems
    return []


@pytest.mark.parametrize(
    ("url", "line"),
    [
        (
            "redis://:PASSWORD456@127.0.0.1:1/0?ssl=true",
            "invalid setting REDIS_URL='redis://***@127.0.0.1:1/0?ssl=***': redis-py takes no "
            "parameter ssl in it; TLS: rediss://",
        ),
        (
            "redis://127.0.0.1:1/0?foo=1",
            "invalid setting REDIS_URL='redis://127.0.0.1:1/0?foo=***': redis-py takes no "
            "parameter foo in it",
        ),
        (
            "redis://127.0.0.1:1/0?socket_timeout=abc",
            "invalid setting REDIS_URL='redis://127.0.0.1:1/0?socket_timeout=***': redis-py "
            "cannot use it: Invalid value for 'socket_timeout' in connection URL.",
        ),
        (
            "redis://127.0.0.1:1/0?protocol=5",
            "invalid setting REDIS_URL='redis://127.0.0.1:1/0?protocol=***': redis-py cannot use "
            "it: protocol must be either 2 or 3",
        ),
    ],
)
def test_a_redis_url_parameter_redis_py_cannot_use_is_named(url: str, line: str) -> None:
    """REDIS_URL's query parameters go to redis-py's connection as they are: one it does not
    take, or a value it cannot read, failed only on connecting, with a traceback."""
    assert problems({"REDIS_URL": url}) == [line]
    result = run_cli({"REDIS_URL": url}, "wait-redis", "--timeout", "1")
    assert cli_ok(result, 2) and result.output == line + "\n"


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6389/0?socket_timeout=2&health_check_interval=10",
        "rediss://h:6380/0?ssl_cert_reqs=none",
        "unix:///run/redis.sock?db=2",
    ],
)
def test_the_redis_url_parameters_redis_py_takes_pass(url: str) -> None:
    assert problems({"REDIS_URL": url}) == []


def test_gunicorns_master_asks_without_importing_redis_py() -> None:
    """gunicorn's master checks the settings before its workers' gevent patches ssl: redis-py
    imported there would keep ssl names unpatched in every worker (ledger/redis_url.py)."""
    code = (
        "import sys; from webhook import serving\n"
        "try:\n"
        "    serving.load_or_exit({'STRIPE_WEBHOOK_SECRET': 'whsec_x',"
        " 'REDIS_URL': 'redis://127.0.0.1:1/0?ssl=true'})\n"
        "finally:\n"
        "    print('redis' in sys.modules)\n"
    )
    master = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert master.returncode == 2 and master.stdout == "False\n"
    assert master.stderr.splitlines() == [
        "invalid setting REDIS_URL='redis://127.0.0.1:1/0?ssl=***': redis-py takes no "
        "parameter ssl in it; TLS: rediss://"
    ]


@pytest.mark.parametrize(
    ("query", "why"),
    [
        *(
            (f"{name}={value}", f"{name} must be a number of seconds above 0, at most 315532800")
            for name in ("socket_timeout", "socket_connect_timeout", "timeout")
            for value in ("-1", "0", "nan", "inf", "1e12")
        ),
        ("socket_timeout=abc", "Invalid value for 'socket_timeout' in connection URL."),
        ("socket_connect_timeout=x", "Invalid value for 'socket_connect_timeout'"),
        ("client_name=bad%20name", "client_name must be printable ASCII without spaces"),
        ("client_name=caf%C3%A9", "client_name must be printable ASCII without spaces"),
        ("max_connections=0", "max_connections must be a whole number from 1 to 10000"),
        ("max_connections=1000000000", "max_connections must be a whole number from 1 to 10000"),
        ("socket_read_size=0", "socket_read_size must be a whole number from 1 to 67108864"),
        ("health_check_interval=-1", "health_check_interval must be a whole number from 0 to"),
        ("encoding=nope", "encoding must name a Python codec"),
        ("encoding_errors=nope", "encoding_errors must name a Python error handler"),
    ],
)
def test_a_value_redis_py_reads_but_cannot_use_is_named(query: str, why: str) -> None:
    """redis-py reads these values and builds its connection with them; the socket, the pool
    or the server then refuses each command (a 500 page per delivery, a traceback per CLI
    call)."""
    lines = problems({"REDIS_URL": f"redis://:PASSWORD456@127.0.0.1:1/0?{query}"})
    assert len(lines) == 1, lines
    name = query.partition("=")[0]
    shown = f"invalid setting REDIS_URL='redis://***@127.0.0.1:1/0?{name}=***': redis-py "
    assert lines[0].startswith(shown + "cannot use it: "), lines[0]
    assert why in lines[0] and "PASSWORD456" not in lines[0]


@pytest.mark.parametrize("name", ["retry", "retry_on_error", "socket_type", "decode_responses"])
def test_a_parameter_redis_py_takes_only_as_a_python_value_is_named(name: str) -> None:
    """Given as text, it fails on connecting (``retry``, ``socket_type``) or means the
    opposite (``decode_responses=false`` is a true string)."""
    assert problems({"REDIS_URL": f"redis://127.0.0.1:1/0?{name}=false"}) == [
        f"invalid setting REDIS_URL='redis://127.0.0.1:1/0?{name}=***': redis-py cannot take "
        f"parameter {name} from a URL's text (it wants a Python value there)"
    ]


@pytest.mark.parametrize(
    "query",
    [
        "socket_timeout=0.5&socket_connect_timeout=3&timeout=20",
        "client_name=ledger-eu_1&max_connections=100&socket_read_size=65536",
        "health_check_interval=0&encoding=latin-1&encoding_errors=replace&protocol=3",
    ],
)
def test_the_values_redis_py_can_use_pass(query: str) -> None:
    assert problems({"REDIS_URL": f"redis://127.0.0.1:1/0?{query}"}) == []
