"""The checker: compares what a client sent and was answered with what the ledger and the
downstream recorded, and reports lost and duplicated work separately (Jepsen-style).

Used by the replay script's ``--expect-once``, the fault tests and the soak.
"""

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Findings:
    lost: list[dict[str, Any]] = field(default_factory=list)
    """Acknowledged (2xx) deliveries the ledger does not have: event id, acked, recorded."""
    duplicated: list[dict[str, Any]] = field(default_factory=list)
    """Payments with more than one effect, or more than one re-grant, or a re-grant without
    its effect."""
    unfulfilled: list[str] = field(default_factory=list)
    """Payments that should have an effect and have none (not interrupted either)."""
    interrupted: list[str] = field(default_factory=list)
    """Payments waiting for a person (not a failure of the checker: surfaced, not hidden)."""
    unexpected: list[str] = field(default_factory=list)
    """Effects for payments nobody paid in this run."""
    checks: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unfulfilled or self.unexpected)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def check(
    acked: Mapping[str, int],
    recorded: Mapping[str, int],
    paid_payments: set[str],
    effects: Mapping[str, int],
    states: Mapping[str, str],
    regrants: Mapping[str, int] | None = None,
) -> Findings:
    """``acked``: 2xx answers per event id; ``recorded``: ledger deliveries per event id
    (for this run); ``paid_payments``: payments with an acknowledged paid event;
    ``effects``: effects per payment from the downstream's own record (or the ledger's
    when the downstream keeps none); ``states``: payment states in the ledger;
    ``regrants``: re-grants per payment (its fulfilment again after a dispute won after its
    reversal, REVERSAL_DISPUTE_WON=fulfil, under its own key): one is allowed, on top of
    the payment's one effect."""
    found = Findings()
    for event_id, count in sorted(acked.items()):
        found.checks += 1
        if recorded.get(event_id, 0) < count:
            found.lost.append(
                {"event": event_id, "acked": count, "recorded": recorded.get(event_id, 0)}
            )
    for payment_key in sorted(paid_payments):
        found.checks += 1
        n, again = effects.get(payment_key, 0), (regrants or {}).get(payment_key, 0)
        if n > 1 or again > 1 or (again and n != 1):
            twice = {"payment": payment_key, "effects": n}
            found.duplicated.append(twice | ({"regrants": again} if again else {}))
        elif n == 0 and states.get(payment_key) == "interrupted":
            found.interrupted.append(payment_key)
        elif n == 0:
            found.unfulfilled.append(payment_key)
    for payment_key in sorted(set(effects) | set(regrants or {})):
        n = effects.get(payment_key, 0) + (regrants or {}).get(payment_key, 0)
        if n and payment_key not in paid_payments:
            found.checks += 1
            found.unexpected.append(payment_key)
    return found
