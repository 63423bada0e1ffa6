"""The checker itself must find what it exists to find."""

from ledgerctl.checker import check

ACKED = {"evt_1": 3, "evt_2": 1}
RECORDED = {"evt_1": 3, "evt_2": 1}


def test_clean_run_is_ok() -> None:
    found = check(ACKED, RECORDED, {"pi_1"}, {"pi_1": 1}, {"pi_1": "fulfilled"})
    assert found.ok and found.checks == 3


def test_finds_an_injected_double_effect() -> None:
    found = check(ACKED, RECORDED, {"pi_1"}, {"pi_1": 2}, {"pi_1": "fulfilled"})
    assert not found.ok and found.duplicated == [{"payment": "pi_1", "effects": 2}]
    assert found.lost == []


def test_finds_a_dropped_ledger_write() -> None:
    found = check(ACKED, {"evt_1": 2, "evt_2": 1}, {"pi_1"}, {"pi_1": 1}, {})
    assert not found.ok and found.lost == [{"event": "evt_1", "acked": 3, "recorded": 2}]
    assert found.duplicated == []


def test_interrupted_is_surfaced_not_failed() -> None:
    found = check(ACKED, RECORDED, {"pi_1"}, {}, {"pi_1": "interrupted"})
    assert found.ok and found.interrupted == ["pi_1"] and found.unfulfilled == []


def test_missing_effect_and_stray_effect() -> None:
    found = check(ACKED, RECORDED, {"pi_1"}, {"pi_9": 1}, {"pi_1": "failed"})
    assert found.unfulfilled == ["pi_1"] and found.unexpected == ["pi_9"] and not found.ok


def test_a_regrant_after_a_dispute_won_is_not_a_second_effect() -> None:
    """REVERSAL_DISPUTE_WON=fulfil: one effect plus one re-grant (``refulfil:{pk}``) is
    right; two re-grants, or a re-grant without its effect, is duplicated work."""
    ok = check(ACKED, RECORDED, {"pi_1"}, {"pi_1": 1}, {"pi_1": "fulfilled"}, {"pi_1": 1})
    assert ok.ok and ok.duplicated == []
    twice = check(ACKED, RECORDED, {"pi_1"}, {"pi_1": 1}, {}, {"pi_1": 2})
    assert twice.duplicated == [{"payment": "pi_1", "effects": 1, "regrants": 2}]
    alone = check(ACKED, RECORDED, {"pi_1"}, {}, {}, {"pi_1": 1})
    assert alone.duplicated == [{"payment": "pi_1", "effects": 0, "regrants": 1}]
    stray = check(ACKED, RECORDED, {"pi_1"}, {"pi_1": 1}, {}, {"pi_9": 1})
    assert stray.unexpected == ["pi_9"] and not stray.ok
