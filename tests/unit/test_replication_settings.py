"""The replicated ledger's settings: what cannot work is refused before anything connects,
and people are told where the ledger is (no Redis needed)."""

import pytest
from redis.connection import SSLConnection
from redis.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection

from ledger import settings
from ledger.connection import close, connect, describe
from ledgerctl.banner import redis_line
from tests.support.processes import ROOT


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"REDIS_SENTINELS": "127.0.0.1"}, "host:port"),
        ({"REDIS_SENTINELS": "a:1,b:x"}, "host:port"),
        ({"REDIS_SENTINELS": "a:1", "REDIS_SENTINEL_MASTER": "two words"}, "SENTINEL_MASTER"),
        ({"LEDGER_MIN_REPLICAS": -1}, "from 0 to 100"),
        ({"LEDGER_MIN_REPLICAS": 1, "LEDGER_WAIT_TIMEOUT": 2.0}, "REDIS_SOCKET_TIMEOUT"),
        ({"LEDGER_MIN_REPLICAS": 1, "LEDGER_WAIT_TIMEOUT": 0.0}, "from 0.001 to 300"),
        ({"LEDGER_MIN_REPLICAS": 1, "LEDGER_WAIT_TIMEOUT": 0.0004}, "from 0.001"),  # 0 ms: for ever
    ],
)
def test_settings_that_cannot_work_are_refused(overrides: dict, error: str) -> None:
    with pytest.raises(settings.SettingsError, match=error):
        settings.load({}, **overrides)


def test_sentinel_settings_are_read_from_the_environment() -> None:
    env = {"REDIS_SENTINELS": "10.0.0.1:26379, sentinel-b:26380", "LEDGER_MIN_REPLICAS": "1"}
    s = settings.load(env)
    assert s.REDIS_SENTINELS == (("10.0.0.1", 26379), ("sentinel-b", 26380))
    assert s.LEDGER_MIN_REPLICAS == 1 and s.REDIS_SENTINEL_MASTER == "ledger"
    assert describe(s) == "primary 'ledger' of the Sentinels at 10.0.0.1:26379,sentinel-b:26380"
    assert describe(settings.load({"REDIS_URL": "redis://:pw@h:1/0"})) == "redis://***@h:1/0"


def test_start_up_banner_names_the_sentinels() -> None:
    env = {"REDIS_SENTINELS": "127.0.0.1:26390", "LEDGER_MIN_REPLICAS": "1"}
    line = redis_line(settings.load(env))
    assert "primary 'ledger' of the Sentinels at 127.0.0.1:26390" in line
    assert "LEDGER_MIN_REPLICAS=1" in line
    assert "Procfile.ha" in (ROOT / "scripts" / "run.sh").read_text()
    assert "var/redis" in redis_line(settings.load({"REDIS_URL": "redis://127.0.0.1:6389/0"}))


@pytest.mark.parametrize("tls", [False, True])
def test_through_sentinel_the_database_and_tls_are_the_settings(tls: bool) -> None:
    """What connect() builds (nothing connects until a command): REDIS_SENTINEL_DB on the
    primary's connections, and with REDIS_SENTINEL_TLS TLS to the Sentinels and the primary."""
    env = {"REDIS_SENTINELS": "127.0.0.1:26390", "REDIS_SENTINEL_DB": "3"}
    s = settings.load({**env, "REDIS_SENTINEL_TLS": str(tls).lower()})
    client = connect(s)
    try:
        pool = client.connection_pool
        assert pool.connection_kwargs["db"] == 3
        expected = SentinelManagedSSLConnection if tls else SentinelManagedConnection
        assert pool.connection_class is expected
        (sentinel,) = pool.sentinel_manager.sentinels
        assert (sentinel.connection_pool.connection_class is SSLConnection) is tls
        assert describe(s).endswith(", db 3, TLS" if tls else ", db 3")
    finally:
        close(client)
