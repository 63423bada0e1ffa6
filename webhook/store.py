"""The Redis connection and the ledger, owned per process (Flask's get_db pattern)."""

from flask import Flask, current_app
from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, TimeoutError
from redis.retry import Retry

from ledger.deliveries import Ledger
from ledger.settings import Settings, from_config

EXTENSION = "webhook_ledger"


def connect(settings: Settings) -> Redis:
    """A Redis client that retries timeouts (ledger writes are idempotent, so that is safe)."""
    return Redis.from_url(
        settings.REDIS_URL,
        socket_timeout=settings.REDIS_SOCKET_TIMEOUT,
        socket_connect_timeout=settings.REDIS_SOCKET_TIMEOUT,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.02), settings.REDIS_RETRIES),
        retry_on_error=[ConnectionError, TimeoutError],
        health_check_interval=30,
    )


def get_ledger() -> Ledger:
    """The ledger of the current app, created on first use in each process."""
    ledger = current_app.extensions.get(EXTENSION)
    if ledger is None:
        ledger = Ledger(connect(from_config(current_app.config)), from_config(current_app.config))
        current_app.extensions[EXTENSION] = ledger
    return ledger


def get_redis() -> Redis:
    return get_ledger().redis


def init_app(app: Flask) -> None:
    """Nothing connects at import or app creation: gunicorn may fork after both."""
    app.extensions.pop(EXTENSION, None)
