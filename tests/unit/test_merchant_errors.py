"""A bug in the merchant's own ``module:function`` (an exception it did not mean to raise):
the payment's error says where it was raised, the innermost frame of the merchant's code
(never the service's, nor a library's it called), and the worker's log gets its traceback
once, at ERROR, masked as every error the service logs is. Before, only ``KeyError: 'x'``
was said anywhere, with no file or line. The exceptions of workers/api.py, raised on
purpose, log none."""

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.purchase import Purchase, purchase_of
from workers.actions import CallableAction
from workers.api import DownstreamDown, GiveUp, RetryLater
from workers.jobs import run_action

SHOP = """import json


def grant(purchase):
    plans = {"pro": 1}
    return _plan(plans)  # calls


def _plan(plans):
    return {"plan": plans["x"]}  # KeyError


def parse(purchase):
    return json.loads("{not json")  # in json


def leak(purchase):
    raise ValueError("bug: https://u:PASSWORD456@a.example/x?api_key=SECRET123 sk_live_abcd1234")


def notify(purchase):  # httpx's raise_for_status() wording, a capability URL's secret in its path
    raise RuntimeError("Client error '404 Not Found' for url 'https://hooks.test/T0/B0/HOOKSECRET'")
"""


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``errshop/actions.py``: the merchant's module, on ``sys.path`` as a worker finds it."""
    root = tmp_path_factory.mktemp("merchant")
    (root / "errshop").mkdir()
    (root / "errshop" / "__init__.py").write_text("")
    (root / "errshop" / "actions.py").write_text(SHOP)
    sys.path.insert(0, str(root))
    yield root / "errshop" / "actions.py"
    sys.path.remove(str(root))
    for name in [name for name in sys.modules if name.partition(".")[0] == "errshop"]:
        del sys.modules[name]


def line(mark: str) -> int:
    """The line of SHOP that holds ``mark``."""
    return next(n for n, text in enumerate(SHOP.splitlines(), 1) if mark in text)


def call() -> Purchase:
    return purchase_of("pi_1", 3, {"amount": "2000", "currency": "usd", "events": "evt_1"})


def attempt(caplog: pytest.LogCaptureFixture, action: CallableAction) -> tuple[str, str, list[str]]:
    """One attempt of ``action``: its outcome, its error, what it logged at ERROR."""
    with caplog.at_level(logging.INFO):
        outcome, detail, *_ = run_action(action, call(), 5, 1)
    return outcome, detail, [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_bug_is_said_where_it_was_raised_and_its_traceback_logged(
    shop: Path, caplog: pytest.LogCaptureFixture
) -> None:
    action = CallableAction("errshop.actions:grant", replay_safe=False)
    outcome, detail, [logged] = attempt(caplog, action)
    assert outcome == "interrupted"  # unknown how far it got: not replay-safe
    assert detail == f"KeyError: 'x' (at errshop/actions.py:{line('# KeyError')} in _plan)"
    assert logged.startswith("pi_1 token 3: errshop.actions:grant raised KeyError: 'x' (at ")
    assert "Traceback (most recent call last):" in logged
    assert f'"{shop}", line {line("# calls")}, in grant' in logged
    assert f'"{shop}", line {line("# KeyError")}, in _plan' in logged
    assert logged.endswith("KeyError: 'x'\n")


def test_the_frame_named_is_the_merchants_not_a_librarys(
    shop: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outcome, detail, [logged] = attempt(caplog, CallableAction("errshop.actions:parse", True))
    assert outcome == "retry"
    assert detail.startswith("JSONDecodeError: Expecting property name enclosed in double")
    assert detail.endswith(f" (at errshop/actions.py:{line('# in json')} in parse)")
    assert "json/decoder.py" in logged  # the traceback is whole


def test_the_traceback_is_masked_as_every_logged_error(
    shop: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, detail, [logged] = attempt(caplog, CallableAction("errshop.actions:leak", False))
    for secret in ("PASSWORD456", "SECRET123", "abcd1234"):
        assert secret not in detail and secret not in logged, logged
    assert detail.endswith(
        f"sk_live_*** (at errshop/actions.py:{line('raise ValueError')} in leak)"
    )
    assert logged.count("https://***@a.example/***?api_key=***") == 3  # said, its line, said


def test_a_capability_urls_path_is_masked_however_the_client_words_it(
    shop: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, detail, [logged] = attempt(caplog, CallableAction("errshop.actions:notify", False))
    assert "HOOKSECRET" not in detail and "HOOKSECRET" not in logged, logged
    assert detail.startswith(
        "RuntimeError: Client error '404 Not Found' for url 'https://hooks.test/***'"
    )


@pytest.mark.parametrize(
    "error",
    [RetryLater("busy"), GiveUp("no such product"), DownstreamDown("maintenance")],
    ids=["RetryLater", "GiveUp", "DownstreamDown"],
)
def test_an_exception_raised_on_purpose_logs_no_traceback(
    shop: Path, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    def raising(purchase: object) -> None:
        raise error

    action = CallableAction("errshop.actions:grant", replay_safe=False)
    action.fn = raising
    _, detail, logged = attempt(caplog, action)
    assert detail == str(error) and logged == []
