"""The Redis client every process uses (web, workers, CLI, replay): one place for its
timeouts and retries."""

from redis import BlockingConnectionPool, Redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, TimeoutError
from redis.retry import Retry

from ledger.settings import Settings


def connect(settings: Settings) -> Redis:
    """A Redis client that retries timeouts (ledger writes are idempotent, so that is safe)."""
    # Blocking: a gevent worker serves hundreds of requests at once; beyond the pool's size
    # they wait for a connection (up to the socket timeout) instead of failing at once.
    pool = BlockingConnectionPool.from_url(
        settings.REDIS_URL,
        max_connections=settings.REDIS_MAX_CONNECTIONS,
        timeout=settings.REDIS_SOCKET_TIMEOUT,
        socket_timeout=settings.REDIS_SOCKET_TIMEOUT,
        socket_connect_timeout=settings.REDIS_SOCKET_TIMEOUT,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.02), settings.REDIS_RETRIES),
        retry_on_error=[ConnectionError, TimeoutError],
        health_check_interval=30,
    )
    return Redis.from_pool(pool)
