"""``summary`` and ``fulfilment status`` show each downstream's circuit breaker: labelled
fulfilment and reversal when REVERSAL_ACTION has its own downstream, one otherwise."""

import msgspec
from rich.console import Console

from ledger.read.fulfilment import Breaker, Fulfilment
from ledgerctl.render_gate import fulfilment

CLOSED = Breaker(
    state="closed",
    failures=0,
    threshold=5,
    cooldown_s=30.0,
    opened_at=None,
    open_until=None,
    last_error=None,
    opens=0,
    probes=0,
)


def shown(reversal: Breaker | None) -> str:
    gate = Fulfilment(
        paused=None,
        resumed_at=None,
        resumed_by=None,
        breaker=CLOSED,
        reversal_breaker=reversal,
        max_rate=0,
        calls_last_second=0,
        waiting={"breaker": 0, "reversal_breaker": 2},
    )
    console = Console(width=200, record=True)
    console.print(fulfilment(gate))
    return console.export_text()


def test_a_reversal_downstream_of_its_own_shows_its_breaker_apart() -> None:
    failing = msgspec.structs.replace(
        CLOSED, state="open", failures=3, last_error="http 503", opens=1, probes=2
    )
    text = shown(failing)
    assert "fulfilment downstream breaker" in text and "reversal downstream breaker" in text
    assert "OPEN" in text and "http 503" in text and "1 / 2" in text
    assert "payments waiting: reversal_breaker" in text


def test_one_downstream_one_breaker_unlabelled() -> None:
    text = shown(None)
    assert "downstream breaker" in text and "reversal downstream breaker" not in text
    assert "fulfilment downstream breaker" not in text
