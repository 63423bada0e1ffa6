"""The Redis server the protocol explorer and its pinned tests share, one per test module
(``protocol_redis``; a pytest plugin of tests/conftest.py)."""

from pathlib import Path

import pytest

from tests.support.processes import RedisServer


@pytest.fixture(scope="module")
def protocol_redis(tmp_path_factory: pytest.TempPathFactory):
    server = RedisServer(Path(tmp_path_factory.mktemp("protocol"))).start()
    yield server
    server.stop()
