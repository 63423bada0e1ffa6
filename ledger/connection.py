"""The Redis client every process uses (web, workers, CLI, replay): one place for its
timeouts and retries."""

from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, TimeoutError
from redis.retry import Retry

from ledger.settings import Settings


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
