"""The shared gate of fulfilment for people: pause, circuit breaker, call rate, and the
payments waiting because of them (``summary`` and ``fulfilment status``)."""

from typing import Any

from rich.table import Table

from ledger.read.fulfilment import Fulfilment
from ledgerctl.terminal import iso, kv_table


def fulfilment(f: Fulfilment) -> Table:
    b, p = f.breaker, f.paused
    rows: dict[str, Any] = {
        "fulfilment": "PAUSED" if p else "running",
    }
    if p:
        rows |= {"paused since": iso(p.since), "paused by": p.by, "why": p.reason or "-"}
    elif f.resumed_at:
        rows["last resumed"] = f"{iso(f.resumed_at)} by {f.resumed_by or '-'}"
    rows["downstream breaker"] = b.state.upper() if b.state != "closed" else "closed"
    if b.state != "closed":
        rows |= {"open since": iso(b.opened_at), "no call before": iso(b.open_until)}
    threshold = f"{b.threshold} witnesses" if b.threshold else "off"
    rows |= {
        "outage witnesses (opens at)": f"{b.failures} ({threshold})",
        "cool-down (s)": b.cooldown_s,
        "opened / probes so far": f"{b.opens} / {b.probes}",
        "last down failure": b.last_error or "-",
        "calls in the last second (limit)": f"{f.calls_last_second} ({f.max_rate or 'none'})",
    }
    rows |= {f"payments waiting: {reason}": n for reason, n in f.waiting.items()}
    waiting = sum(f.waiting.values())
    caption = f"{waiting:,} payment(s) wait without spending attempts" if waiting else None
    return kv_table("Fulfilment gate", rows, caption=caption)
