"""A worker says at its start whether each action is replay-safe and what says so: a
developer set FULFILMENT_REPLAY_SAFE=false for a function marked ``@replay_safe`` and
nothing told them the decorator wins (the guarantees' row was read from prove-action's
footer)."""

import logging

import pytest

from ledger.settings import load
from tests.support.constants import SECRET
from workers.actions import say_replay_safety


def lines(caplog: pytest.LogCaptureFixture, **env: str) -> list[str]:
    settings = load({"STRIPE_WEBHOOK_SECRET": SECRET, **env})
    with caplog.at_level(logging.INFO, logger="workers.actions"):
        say_replay_safety(settings)
    return [r.getMessage() for r in caplog.records if r.name == "workers.actions"]


def test_the_decorator_wins_over_the_setting_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    said = lines(
        caplog, FULFILMENT_ACTION="examples.actions:grant_access", FULFILMENT_REPLAY_SAFE="false"
    )
    assert said == [
        "FULFILMENT_ACTION examples.actions:grant_access: replay-safe"
        " (@replay_safe on the function, whatever FULFILMENT_REPLAY_SAFE says)"
    ]


def test_an_http_action_follows_its_setting_and_a_built_in_is_replay_safe(
    caplog: pytest.LogCaptureFixture, tmp_path
) -> None:
    said = lines(
        caplog,
        FULFILMENT_ACTION=f"sqlite:///{tmp_path / 'orders.sqlite3'}",
        REVERSAL_ACTION="https://shop.example/hooks/s3cret/revoke",
    )
    assert len(said) == 2 and "s3cret" not in " ".join(said)
    assert said[0].endswith(": replay-safe (built-in: its key is recorded with the effect)")
    assert said[1].startswith("REVERSAL_ACTION ")
    assert said[1].endswith(": not replay-safe (REVERSAL_REPLAY_SAFE=false)")
