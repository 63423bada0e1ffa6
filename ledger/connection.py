"""The Redis client every process uses (web, workers, CLI, replay): one place for its
timeouts and retries, and for where the primary is.

From ``REDIS_URL``, or from ``REDIS_SENTINELS`` through redis-py's Sentinel support, which
asks the Sentinels for the primary on every new connection and drops a connection that finds
the primary demoted (``READONLY``), so a failover is found without a restart
(docs/DEPLOYMENT.md). Through Sentinel the database is REDIS_SENTINEL_DB, and
REDIS_SENTINEL_TLS makes every connection TLS (to the Sentinels and to the data nodes).
"""

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from redis import BlockingConnectionPool, Redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import ConnectionError, TimeoutError
from redis.maint_notifications import MaintNotificationsConfig
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from ledger.redact import mask_url
from ledger.setting_fields import spelled
from ledger.settings import Settings

T = TypeVar("T")
_RETRYING: ContextVar[bool] = ContextVar("ledger_redis_retrying", default=False)


class OutermostRetry(Retry):
    """Retries only at the outermost call. redis-py retries a command with its connection's
    policy and, inside that, the connection's health check (a PING before a connection idle
    30 s or new) with the same policy again: with Redis frozen (SIGSTOP, a stalled VM, its
    connections still accepted by the kernel) a call waited (REDIS_RETRIES + 1)² socket
    timeouts, 34 s at the defaults, past Stripe's wait. A call inside another tries once and
    leaves the retrying to the outer one, which reconnects: REDIS_RETRIES + 1 tries in all."""

    def call_with_retry(
        self,
        do: Callable[[], T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        if _RETRYING.get():
            once = Retry(NoBackoff(), 0, self._supported_errors)
            return once.call_with_retry(do, fail, is_retryable, with_failure_count)
        token = _RETRYING.set(True)
        try:
            return super().call_with_retry(do, fail, is_retryable, with_failure_count)
        finally:
            _RETRYING.reset(token)


class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's pool, waiting for a free connection like the single-node one does."""


def options(settings: Settings) -> dict[str, Any]:
    """Pool options of both ways of connecting: timeouts and dropped connections are
    retried (every ledger write is idempotent per request id)."""
    # Blocking: a gevent worker serves hundreds of requests at once; beyond the pool's size
    # they wait for a connection (up to the socket timeout) instead of failing at once.
    timeout = settings.REDIS_SOCKET_TIMEOUT
    return {
        "max_connections": settings.REDIS_MAX_CONNECTIONS,
        "timeout": timeout,
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": OutermostRetry(ExponentialBackoff(cap=0.5, base=0.02), settings.REDIS_RETRIES),
        "retry_on_error": [ConnectionError, TimeoutError],
        "health_check_interval": 30,
        # redis-py's default ("auto", RESP3) also turns off the pool's refusal to hand out a
        # connection holding a reply nobody read (readable bytes could be a maintenance
        # push), so the next command would read that reply as its own. Maintenance
        # notifications come from Redis Enterprise and Cloud; the ledger does without them.
        "maint_notifications_config": MaintNotificationsConfig(enabled=False),
    }


def connect(settings: Settings) -> Redis:
    """The ledger's client: REDIS_URL, or the primary of REDIS_SENTINELS when that is set."""
    if not settings.REDIS_SENTINELS:
        pool = BlockingConnectionPool.from_url(settings.REDIS_URL, **options(settings))
        return Redis.from_pool(pool)
    timeout = settings.REDIS_SOCKET_TIMEOUT
    # redis-py's Redis and its Sentinel pool take ssl=True as rediss:// does (ssl_* options
    # at their defaults: the system's CAs, hostname checked).
    tls = {"ssl": True} if settings.REDIS_SENTINEL_TLS else {}
    sentinels = Sentinel(
        settings.REDIS_SENTINELS,
        # One try per Sentinel: a dead one is skipped at once and the next one asked.
        sentinel_kwargs={
            "password": settings.REDIS_SENTINEL_PASSWORD or None,
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry": Retry(NoBackoff(), 0),
            **tls,
        },
    )
    return sentinels.master_for(
        settings.REDIS_SENTINEL_MASTER,
        connection_pool_class=BlockingSentinelPool,
        password=settings.REDIS_PASSWORD or None,
        db=settings.REDIS_SENTINEL_DB,
        **tls,
        **options(settings),
    )


def close(redis: Redis) -> None:
    """Close a client from :func:`connect`, with its connections to the Sentinels."""
    redis.close()
    sentinels = getattr(redis.connection_pool, "sentinel_manager", None)
    if sentinels is not None:
        sentinels.close()


def describe(settings: Settings) -> str:
    """Where the ledger is, for people (credentials masked)."""
    if not settings.REDIS_SENTINELS:
        return mask_url(settings.REDIS_URL)
    where = spelled(settings, "REDIS_SENTINELS")
    db = f", db {settings.REDIS_SENTINEL_DB}" if settings.REDIS_SENTINEL_DB else ""
    tls = ", TLS" if settings.REDIS_SENTINEL_TLS else ""
    return f"primary {settings.REDIS_SENTINEL_MASTER!r} of the Sentinels at {where}{db}{tls}"
