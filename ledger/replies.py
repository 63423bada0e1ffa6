"""What the ledger scripts answer, by name: one struct per script whose reply has more than
one value. A script names its reply's fields once, at its top (``local reply =
replies('verdict', 'state')``, lua/prelude.lua), and answers ``reply{verdict = ...}``: an
array in that order, a field it leaves out nil. Each struct here has those fields in that
order; :class:`ledger.scripts.Script` checks they agree when it loads the script and turns
each reply into its struct (a field left out takes the default). The other scripts answer
one value: mark_calling 1|0, recover its verdict, breaker the breaker's state, release,
purge and keep_rejections a count, record_rejection 1, stripe_rate the milliseconds to wait
(0: go), stripe_wait when the payment is due again (0: it did not wait), keep_purchase how
many fields it kept.
"""

from typing import Any

import msgspec


class Reply(msgspec.Struct, frozen=True):
    """A script's reply (subclasses name the fields)."""


class Recorded(Reply, frozen=True):
    """record_delivery: what the ledger made of one delivery."""

    deliveries: int
    """The event's delivery count."""
    duplicate: bool
    conflict: bool
    """A copy of a known event with other bytes than the first."""
    enqueued: bool
    payment_state: str
    payment_key: str
    """The payment the event joined: its own key, or the one an id Stripe ties it to."""


class Start(Reply, frozen=True):
    """start_attempt: ``go`` with a token and what the downstream call needs, ``skip`` with
    its reason, or ``missing``."""

    verdict: str
    token: int = 0
    reason: str = ""
    amount: str = ""
    currency: str = ""
    livemode: str = ""
    events: str = ""
    """The payment's event ids, space-separated."""


class Finished(Reply, frozen=True):
    """finish_attempt: the outcome recorded (or ``stale``, ``already``, ``missing``) and the
    payment's state."""

    verdict: str
    state: str


class Decided(Reply, frozen=True):
    """operator: ``ok`` (``state`` the new one), ``refused`` (``state`` the current one),
    ``by_hand`` (a retry of a payment only a person grants: refused) or ``wait``: the worker
    process ``caller`` may be in the last call until ``until_ms``."""

    verdict: str
    state: str = ""
    until_ms: int = 0
    caller: str = ""


class Admission(Reply, frozen=True):
    """gate: whether a worker may call the downstream now."""

    verdict: str
    """go | pass (no call can follow) | wait (deferred in the ledger) | rate (ask again)"""
    probe: bool = False
    dirty: bool = False
    """The breaker counted failures or was open: a success must be reported (it resets them)."""
    reason: str = ""
    wait_ms: int = 0
    """rate: how long until a slot frees."""
    until_ms: int = 0
    """wait: when the payment is due again (epoch ms)."""


SHAPES: dict[str, type[Reply]] = {
    "record_delivery": Recorded,
    "start_attempt": Start,
    "finish_attempt": Finished,
    "operator": Decided,
    "gate": Admission,
}
"""Script name -> the struct of its reply."""


def read(shape: type[Reply], raw: list[Any]) -> Any:
    """A script's array reply as ``shape``: by position, each value decoded; nil fields
    keep their default."""
    fields = {
        name: value.decode() if isinstance(value, bytes) else value
        for name, value in zip(shape.__struct_fields__, raw, strict=True)
        if value is not None
    }
    return msgspec.convert(fields, shape, strict=False)
