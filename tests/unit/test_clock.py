"""ledger/clock.py: Redis TIME replies in epoch ms, the look-back durations that both
bulk decisions and reconcile take as --since, and the sweeper's watch on Redis's clock."""

from collections.abc import Iterator

import pytest

from ledger.clock import StepWatch, duration_s, time_ms


def test_a_time_reply_in_epoch_ms() -> None:
    # redis-py answers TIME as (seconds, microseconds); pipelined, the same pair.
    assert time_ms((1_700_000_000, 999_999)) == 1_700_000_000_999
    assert time_ms((b"1700000000", b"1000")) == 1_700_000_000_001


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("12h", 43200),
        ("3d", 259200),
        ("2w", 1_209_600),
        ("1h30m", 5400),
        (" 7D ", 604800),
    ],
)
def test_durations(given: str, seconds: int) -> None:
    assert duration_s(given) == seconds


@pytest.mark.parametrize("given", ["", "yesterday", "5", "-1h", "2h 3m", "h", "1hh", "3y"])
def test_malformed_durations_are_refused(given: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        duration_s(given)


class Scripted:
    """Both clocks of a StepWatch, moved by the test: ``ms`` is Redis's clock; this
    process's clock reads ``s``, and Redis answers ``answer_s`` after being asked."""

    def __init__(self) -> None:
        self.ms, self.s, self.answer_s = 1_800_000_000_000, 100.0, 0.0
        self.watch = StepWatch(30, 0.25, self.redis, lambda: self.s)

    def redis(self) -> int:
        self.s += self.answer_s  # the answer takes this long; Redis read at the end
        self.ms += int(self.answer_s * 1000)
        return self.ms

    def run(self, seconds: float, redis_rate: float = 1.0) -> None:
        self.s += seconds
        self.ms += int(seconds * 1000 * redis_rate)

    def passes(self, seconds: float, every: float = 2.0, redis_rate: float = 1.0) -> Iterator[int]:
        for _ in range(int(seconds / every)):
            self.run(every, redis_rate)
            self.watch.read()
            yield self.watch.trusted_until_ms()


def test_a_watch_vouches_for_redis_clock_once_it_has_watched_for_a_lease() -> None:
    c = Scripted()
    c.watch.read()
    assert c.watch.trusted_until_ms() == 0
    assert list(c.passes(28)) == [0] * 14
    trusted = list(c.passes(4))[-1]
    assert trusted == c.ms + 250  # the last reading, nothing seen since, the tolerance
    c.run(1)
    assert c.watch.trusted_until_ms() == c.ms + 250
    assert c.watch.steps == 0


def test_slow_answers_and_backward_steps_are_not_steps() -> None:
    c = Scripted()
    list(c.passes(32))
    c.answer_s = 3.0  # Redis answers late: its clock ran as long as this process waited
    assert all(list(c.passes(10)))
    c.answer_s = 0.0
    c.ms -= 60_000  # Redis's clock steps back: leases last longer, none ends early
    assert all(list(c.passes(10)))
    assert c.watch.steps == 0


def test_a_step_or_a_fast_clock_holds_every_lease_for_a_lease() -> None:
    c = Scripted()
    list(c.passes(32))
    c.ms += 400  # more than the tolerance, less than a pass
    assert list(c.passes(2)) == [0]
    assert (c.watch.steps, c.watch.last_step_ms) == (1, 400)
    assert list(c.passes(28)) == [0] * 14 and all(c.passes(4))
    # A clock that runs 2 % fast is a step spread out: 0.6 s gained over a lease.
    assert 0 in list(c.passes(30, redis_rate=1.02))
    assert c.watch.steps >= 2
