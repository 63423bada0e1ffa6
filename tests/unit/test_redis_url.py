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
