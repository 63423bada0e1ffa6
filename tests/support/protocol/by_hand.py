"""The explorer's machine driven by hand: the pinned tests (tests/integration/test_protocol_*.py)
call its rules and invariants in an order written out, on the real scripts and Redis."""

from collections.abc import Iterator
from typing import Any

from redis import Redis

from ledger.event_shape import data_object
from tests.support.processes import RedisServer
from tests.support.protocol.constants import PAYING, TAKING
from tests.support.protocol.machine import Protocol


def machine_by_hand(server: RedisServer, **setup: Any) -> Protocol:
    """A program on ``server``, set up with ``setup`` (Protocol.setup's arguments)."""
    Protocol.server = server
    Protocol.redis = Redis.from_url(server.url)
    m = Protocol()
    m.setup(**setup)
    return m


def settling_machine(server: RedisServer, **setup: Any) -> Protocol:
    """A program driven by hand, with a replay-safe action that settles."""
    return machine_by_hand(server, seed=7, replay_safe=True, settles=True, **setup)


def unpaid_with_takings(m: Protocol) -> Iterator[tuple[int, str, list[int]]]:
    """The pool's paying events of payments not recorded yet (checked as each is taken),
    with the payment's key and its taking events."""
    for index in (i for i, (e, _) in enumerate(m.events) if e["type"] == PAYING):
        pk = data_object(m.events[index][0])["id"]
        taking = [
            i
            for i, (e, _) in enumerate(m.events)
            if e["type"].startswith(TAKING) and data_object(e).get("payment_intent") == pk
        ]
        if not m.state(pk) and taking:
            yield index, pk, taking
