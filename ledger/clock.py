"""Redis's clock, the one every stored time and every ledger script reads: TIME in epoch
milliseconds, so processes on different machines agree whatever their own clocks say."""

from typing import Any

from redis import Redis


def now_ms(redis: Redis) -> int:
    """Redis's TIME in epoch milliseconds."""
    return time_ms(redis.time())


def time_ms(reply: Any) -> int:
    """A TIME reply (seconds, microseconds) in epoch milliseconds; for a TIME queued on a
    pipeline, whose reply comes back with the others."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000
