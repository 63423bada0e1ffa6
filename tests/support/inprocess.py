"""Fulfilment in the test's own process, for tests whose point is the logic, not a process
dying: deliveries through the real ledger, RQ's SimpleWorker in burst mode, direct sweeps."""

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from rq import Queue, SimpleWorker
from rq.timeouts import TimerDeathPenalty

from ledger import settings
from ledger.attempts import Attempts
from ledger.connection import connect
from ledger.deliveries import Delivery, Ledger, Recorded, new_request_id
from ledger.events import classify
from ledgerctl import samples
from workers import jobs
from workers.sweeper import sweep_once

FAST = {"LEASE_SECONDS": "3", "FULFILMENT_TIMEOUT": "1", "RETRY_BASE_SECONDS": "0.1"}


class InProcessWorker(SimpleWorker):
    """The shipped worker class; its job timeout on a timer thread, not SIGALRM, which the
    call's own deadline (and pytest-timeout) use in this process."""

    death_penalty_class = TimerDeathPenalty


class Fulfilment:
    """The ledger, the RQ queue, the job and the sweeper, all in this process."""

    def __init__(self, config: Mapping[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
        for name, value in {**FAST, **config}.items():
            monkeypatch.setenv(name, str(value))  # the job reads its settings from here
        jobs._context.cache_clear()
        self.settings = settings.load()
        self.redis = connect(self.settings)
        self.ledger = Ledger(self.redis, self.settings)
        self.attempts = Attempts(self.redis, self.settings)

    def deliver(self, event: dict[str, Any]) -> Recorded:
        """Record ``event`` as the receiver does once it has verified it."""
        c = classify(event, self.settings.policy)
        delivery = Delivery(event, samples.encode(event), c, "test", "stripe", new_request_id())
        return self.ledger.record_delivery(delivery)

    def work(self) -> None:
        """Run every queued job, then return (RQ's burst mode)."""
        queue = Queue(self.settings.QUEUE_NAME, connection=self.redis)
        InProcessWorker([queue], connection=self.redis).work(burst=True, logging_level="WARNING")

    def sweep(self) -> Counter[str]:
        """One sweeper pass; what it did, by verdict."""
        return sweep_once(self.attempts)


@pytest.fixture
def fulfilment(
    config: dict[str, object], redis: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Fulfilment]]:
    """``fulfilment(**env)``: the test's config, FAST, then ``env``."""
    yield lambda **env: Fulfilment({**config, **env}, monkeypatch)
    jobs._context.cache_clear()
