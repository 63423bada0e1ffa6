"""Fixtures: a real redis-server per session (flushed per test), the app, its clients, the
service under gunicorn."""

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from redis import Redis

from tests.support.constants import OLD_SECRET, OPS_TOKEN, SECRET
from tests.support.processes import Gunicorn, RedisServer, service_env
from webhook import create_app


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis(redis_server: RedisServer) -> Iterator[Redis]:
    client = Redis.from_url(redis_server.url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def config(redis_server: RedisServer, tmp_path: Path) -> dict[str, object]:
    return {
        "REDIS_URL": redis_server.url,
        "STRIPE_WEBHOOK_SECRET": f"{SECRET},{OLD_SECRET}",
        "OPS_TOKEN": OPS_TOKEN,
        "STRIPE_MODE": "test",  # the shipped sample events are test-mode payloads
        "FULFILMENT_ACTION": f"sqlite:///{tmp_path / 'downstream.sqlite3'}",
    }


@pytest.fixture
def app(config: dict[str, object], redis: Redis) -> Flask:
    return create_app(config)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def rng() -> random.Random:
    return random.Random(20261202)


@pytest.fixture
def web(config: dict[str, object], redis: Redis, tmp_path: Path) -> Iterator[Gunicorn]:
    """The real service under gunicorn (2 workers) over HTTP."""
    env = service_env(str(config["REDIS_URL"]), {k: str(v) for k, v in config.items()})
    server = Gunicorn(env, workers=2, log=tmp_path / "gunicorn.log").start()
    yield server
    server.stop()
