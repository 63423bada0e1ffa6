"""Redis's clock, the one every stored time and every ledger script reads: TIME in epoch
milliseconds, so processes on different machines agree whatever their own clocks say; and
the durations people give to look back with (``--since 2h``)."""

import re
import time
from collections import deque
from collections.abc import Callable
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


class StepWatch:
    """Whether Redis's clock may end leases now, judged by this process's monotonic clock.

    A lease ends by the wall clock of the Redis host (TIME in the scripts), the call it
    covers by its worker's monotonic clock (workers/deadline.py). When Redis's clock steps
    forward (an NTP step, a VM restored from a snapshot, a failover to a replica whose clock
    is ahead), a lease looks over while its call may still run. The looping sweeper shows
    each reading of Redis's clock to this watch: if Redis's clock ran further than this
    process's clock could have since any reading of the last ``hold_s`` seconds, by more than
    ``tolerance_s``, it ends no lease for ``hold_s`` (a lease) on this process's clock: every
    call fenced before the step has ended by then, or been ended by its watchdog. So does a
    watch for ``hold_s`` after its first reading: it cannot know what came before."""

    def __init__(
        self,
        hold_s: float,
        tolerance_s: float,
        redis_now: Callable[[], int],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis_now = redis_now
        """Redis's clock in ms (:func:`now_ms`; the protocol tests' clock in tests)."""
        self.hold_s = hold_s
        self.tolerance_ms = tolerance_s * 1000
        self.monotonic = monotonic
        self.held_until = 0.0
        self.readings: deque[tuple[int, float]] = deque()
        """(Redis's clock in ms, this clock just before asking), oldest first."""
        self.steps = 0
        self.last_step_ms = 0

    def read(self) -> int:
        """Redis's clock (ms), judged against the readings before it."""
        asked = self.monotonic()
        redis_ms = self.redis_now()
        answered = self.monotonic()
        while len(self.readings) > 1 and self.readings[0][1] < answered - self.hold_s:
            self.readings.popleft()
        ahead_ms = max(
            (redis_ms - ms - (answered - then) * 1000 for ms, then in self.readings), default=0.0
        )
        if not self.readings:  # nothing seen before: a step may just have happened
            self.held_until = answered + self.hold_s
        elif ahead_ms > self.tolerance_ms:
            self.steps += 1
            self.last_step_ms = int(ahead_ms)
            self.held_until = answered + self.hold_s
            self.readings.clear()  # the clock they were read on is gone
        self.readings.append((redis_ms, asked))
        return redis_ms

    def trusted_until_ms(self) -> int:
        """The latest time of Redis's clock (ms) at which a lease may be ended now: the last
        reading plus what this clock saw pass since, plus the tolerance; 0 while held."""
        now = self.monotonic()
        if now < self.held_until or not self.readings:
            return 0
        redis_ms, asked = self.readings[-1]
        return int(redis_ms + (now - asked) * 1000 + self.tolerance_ms)
