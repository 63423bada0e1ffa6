"""Redis's clock, the one every stored time and every ledger script reads: TIME in epoch
milliseconds, so processes on different machines agree whatever their own clocks say; and
the durations people give to look back with (``--since 2h``)."""

import re
from typing import Any

from redis import Redis

_DURATION = re.compile(r"(\d+[smhdw])+")
_PART = re.compile(r"(\d+)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def now_ms(redis: Redis) -> int:
    """Redis's TIME in epoch milliseconds."""
    return time_ms(redis.time())


def time_ms(reply: Any) -> int:
    """A TIME reply (seconds, microseconds) in epoch milliseconds; for a TIME queued on a
    pipeline, whose reply comes back with the others."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def duration_s(given: str) -> int:
    """``90s``, ``30m``, ``12h``, ``7d``, ``2w`` (or ``1h30m``) in seconds; ValueError
    otherwise."""
    wanted = given.strip().lower()
    if not _DURATION.fullmatch(wanted):
        raise ValueError(f"{given!r} is not a duration such as 30m, 12h, 3d or 2w")
    return sum(int(n) * _UNIT_S[unit] for n, unit in _PART.findall(wanted))
