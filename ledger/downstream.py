"""Read the built-in SQLite downstream's own tables: an independent record of effects."""

from pathlib import Path
from typing import Any

from workers.actions import open_downstream


def read_downstream(path: str) -> dict[str, Any]:
    """Calls and applied effects per payment, plus totals."""
    if not Path(path).exists():
        return {"totals": {"calls": 0, "effects": 0}, "payments": {}}
    db = open_downstream(path)
    try:
        payments: dict[str, dict[str, int]] = {}
        for key, outcome, count in db.execute(
            "SELECT payment_key, outcome, COUNT(*) FROM calls GROUP BY payment_key, outcome"
        ):
            row = payments.setdefault(
                key, {"calls": 0, "applied": 0, "already_applied": 0, "effects": 0}
            )
            row["calls"] += count
            row[outcome] += count
        for key, count in db.execute(
            "SELECT payment_key, COUNT(*) FROM orders GROUP BY payment_key"
        ):
            row = payments.setdefault(
                key, {"calls": 0, "applied": 0, "already_applied": 0, "effects": 0}
            )
            row["effects"] = count
    finally:
        db.close()
    totals = {
        "calls": sum(r["calls"] for r in payments.values()),
        "effects": sum(r["effects"] for r in payments.values()),
    }
    return {"totals": totals, "payments": dict(sorted(payments.items()))}
