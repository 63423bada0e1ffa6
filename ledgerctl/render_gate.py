"""The shared gate of fulfilment for people: pause, circuit breakers (one per downstream),
call rate, and the payments waiting because of them (``summary`` and ``fulfilment
status``)."""

from typing import Any

from rich.table import Table

from ledger.read.fulfilment import Breaker, Fulfilment, breakers
from ledgerctl.terminal import iso, kv_table


def fulfilment(f: Fulfilment) -> Table:
    p = f.paused
    rows: dict[str, Any] = {
        "fulfilment": "PAUSED" if p else "running",
    }
    if p:
        rows |= {"paused since": iso(p.since), "paused by": p.by, "why": p.reason or "-"}
    elif f.resumed_at:
        rows["last resumed"] = f"{iso(f.resumed_at)} by {f.resumed_by or '-'}"
    shown = breakers(f)
    for action, b in shown.items():
        rows |= breaker_rows(b, f"{action} " if len(shown) > 1 else "")
    rows["calls in the last second (limit)"] = f"{f.calls_last_second} ({f.max_rate or 'none'})"
    rows |= {f"payments waiting: {reason}": n for reason, n in f.waiting.items()}
    waiting = sum(f.waiting.values())
    caption = f"{waiting:,} payment(s) wait without spending attempts" if waiting else None
    return kv_table("Fulfilment gate", rows, caption=caption)


def breaker_rows(b: Breaker, action: str) -> dict[str, Any]:
    """One downstream's breaker; ``action`` ("fulfilment ", "reversal ") names it when the
    reversal's downstream has its own."""
    rows: dict[str, Any] = {
        f"{action}downstream breaker": b.state.upper() if b.state != "closed" else "closed"
    }
    if b.state != "closed":
        rows |= {
            f"{action}open since": iso(b.opened_at),
            f"{action}no call before": iso(b.open_until),
        }
    threshold = f"{b.threshold} witnesses" if b.threshold else "off"
    return rows | {
        f"{action}outage witnesses (opens at)": f"{b.failures} ({threshold})",
        f"{action}cool-down (s)": b.cooldown_s,
        f"{action}opened / probes so far": f"{b.opens} / {b.probes}",
        f"{action}last down failure": b.last_error or "-",
    }
