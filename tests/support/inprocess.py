"""Fulfilment in the test's own process, for tests whose point is the logic, not a process
dying: deliveries through the real ledger, RQ's SimpleWorker in burst mode, direct sweeps."""

import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import msgspec
import pytest
from flask import Flask
from rq import Queue, SimpleWorker
from rq.timeouts import TimerDeathPenalty

from ledger import reconcile, settings
from ledger.attempts import Attempts
from ledger.connection import connect
from ledger.deliveries import Delivery, Ledger, Recorded, new_request_id
from ledger.events import classify
from ledgerctl import samples
from tests.support.constants import OPS_TOKEN, SECRET
from tests.support.helpers import fail_payment, payment_key_of, settled_as, signed_headers
from tests.support.processes import free_port
from webhook import create_app
from workers import jobs
from workers.sweeper import sweep_once

FAST = {"LEASE_SECONDS": "3", "FULFILMENT_TIMEOUT": "1", "RETRY_BASE_SECONDS": "0.1"}


LISTENER_POLL_SECONDS = 0.05


class InProcessWorker(SimpleWorker):
    """The shipped worker class; its job timeout on a timer thread, not SIGALRM, which the
    call's own deadline (and pytest-timeout) use in this process."""

    death_penalty_class = TimerDeathPenalty

    def subscribe(self) -> None:
        """RQ's, with its command listener polling every 50 ms instead of blocking for 60 s.

        RQ's teardown unsubscribes, then stops the listener and waits up to 1 s for it. A
        listener that reads the unsubscribe reply before the stop sees itself still running
        and waits for a subscription again (redis-py's ``get_message`` when unsubscribed),
        so the wait runs out: 0.40 s a burst on average, 8.0 of the 8.8 s of a test that
        runs 20 bursts (cProfile). Polling ends that wait within 50 ms; the channel (stop
        and shutdown commands) works as shipped."""
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(
            sleep_time=LISTENER_POLL_SECONDS,
            daemon=True,
            exception_handler=self._pubsub_exception_handler,
        )


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


class Seeded(msgspec.Struct):
    """Ids of the records the seeded ledger holds."""

    event: str
    fulfilled: str
    failed: str
    interrupted: str


@pytest.fixture
def one_of_everything(
    client: Any,
    redis: Any,
    config: dict[str, object],
    fulfilment: Callable[..., Fulfilment],
    rng: random.Random,
) -> Seeded:
    """A ledger that holds one of everything the ops API shows: a payment fulfilled by a
    worker (attempt, receipt, the downstream's record), a failed and an interrupted one
    (each delivered twice), a rejection and a reconcile run."""
    f = fulfilment()
    fulfilled = samples.payment_events(rng)[2]
    f.deliver(fulfilled)
    f.work()
    assert settled_as(redis, payment_key_of(fulfilled), "fulfilled")
    others = []
    for _ in range(2):
        event = samples.payment_events(rng)[2]
        body = samples.encode(event)
        for _ in range(2):  # a duplicate each
            answer = client.post("/webhooks/stripe", data=body, headers=signed_headers(body))
            assert answer.status_code == 200
        others.append(payment_key_of(event))
    bad = client.post("/webhooks/stripe", data=b"{}", headers=signed_headers(b"{}", "whsec_x"))
    assert bad.status_code == 400
    fail_payment(redis, config, others[0])
    fail_payment(redis, config, others[1], "interrupted")
    seconds, _ = redis.time()
    run = reconcile.Run(
        started_ms=seconds * 1000,
        since=seconds - 3600,
        applied=False,
        every_event=False,
        trigger="cli",
        listed=1,
        finished_ms=seconds * 1000,
    )
    run.missing.append(
        {
            "id": "evt_gone",
            "type": "charge.succeeded",
            "payment": "pi_gone",
            "paid": True,
            "created": seconds - 60,
        }
    )
    reconcile.store(redis, run)
    return Seeded(fulfilled["id"], payment_key_of(fulfilled), others[0], others[1])


def app_without_redis() -> Flask:
    """The app with REDIS_URL pointing where nothing listens, and no retries (the 503s)."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    config = {"REDIS_URL": url, "STRIPE_WEBHOOK_SECRET": SECRET, "OPS_TOKEN": OPS_TOKEN}
    return create_app({**config, "REDIS_RETRIES": 0})
