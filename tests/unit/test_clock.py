"""ledger/clock.py: Redis TIME replies in epoch ms, and the look-back durations that both
bulk decisions and reconcile take as --since."""

import pytest

from ledger.clock import duration_s, time_ms


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
