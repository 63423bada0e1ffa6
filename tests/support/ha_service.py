"""The service on a replicated ledger for tests: gunicorn, fulfilment workers and the
sweeper pointed at the Sentinels of a :class:`tests.support.ha.Cluster`, and the checks run on
whichever primary is current."""

import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from ledger import keys, settings
from ledger.connection import close, connect
from ledger.deliveries import Ledger, LedgerUnavailable, Recorded
from ledger.downstream import read_downstream
from ledgerctl import samples
from ledgerctl.checker import Findings, check
from tests.support.constants import OPS_TOKEN, SECRET
from tests.support.downstream_server import CountingDownstream
from tests.support.ha import Cluster, FulfilmentWorker, queued_bytes
from tests.support.helpers import delivery
from tests.support.processes import Gunicorn, Sweeper, service_env, wait_until
from tests.support.stack import FAST
from tests.support.stopping import Group
from tests.support.storm import Storm

UNUSED_URL = "redis://127.0.0.1:1/0"
"""REDIS_URL of every process here: nothing listens there, so only Sentinel can be used."""
SETTLED = ("fulfilled", "interrupted", "failed", "held")


class Service:
    """gunicorn (2 processes), two fulfilment workers and the sweeper, pointed at Sentinel."""

    def __init__(self, cluster: Cluster, workdir: Path, exits: ExitStack, **extra: str) -> None:
        self.cluster, self.workdir, self.exits = cluster, workdir, exits
        self.env = service_env(
            UNUSED_URL,
            {
                **cluster.env,
                **FAST,
                "STRIPE_WEBHOOK_SECRET": SECRET,
                "OPS_TOKEN": OPS_TOKEN,
                "STRIPE_MODE": "test",
                "FULFILMENT_ACTION": f"sqlite:///{workdir / 'downstream.sqlite3'}",
                **extra,
            },
        )
        parts = Group()  # stopped together after the test
        exits.callback(parts.stop)
        self.web = parts.add(Gunicorn(self.env, workers=2, log=workdir / "web.log")).start()
        for _ in range(2):
            parts.add(FulfilmentWorker(self.env, log=workdir / "worker.log")).start()
        parts.add(Sweeper(self.env, log=workdir / "sweeper.log")).start()
        self.redis = connect(settings.load(self.env))
        exits.callback(close, self.redis)

    def ledger(self) -> Redis:
        """The current primary, found through the Sentinels like the service finds it."""
        return self.redis

    def downstream_effects(self) -> dict[str, int]:
        down = read_downstream(str(self.workdir / "downstream.sqlite3"))
        return {pk: row["effects"] for pk, row in down["payments"].items()}


@pytest.fixture
def exits() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def states(redis: Redis, payment_keys: list[str]) -> dict[str, str]:
    with redis.pipeline(transaction=False) as pipe:
        for pk in payment_keys:
            pipe.hget(keys.payment(pk), "state")
        return {pk: (s or b"").decode() for pk, s in zip(payment_keys, pipe.execute(), strict=True)}


def settle(service: Service, payment_keys: list[str], timeout: float = 120) -> dict[str, str]:
    """Wait until every payment has settled (on whichever primary is current)."""

    def done() -> dict[str, str] | None:
        now = states(service.ledger(), payment_keys)
        return now if all(s in SETTLED for s in now.values()) else None

    return wait_until(done, timeout, 0.25, "every payment to settle")


def checked(service: Service, storm: Storm, payment_keys: list[str], effects: dict) -> Findings:
    """The checker on the current primary: acknowledged deliveries and effects."""
    ledger = service.ledger()
    acked = storm.acked
    with ledger.pipeline(transaction=False) as pipe:
        for event_id in acked:
            pipe.hget(keys.event(event_id), "n")
        counts = pipe.execute()
    recorded = {e: int(n or 0) for e, n in zip(acked, counts, strict=True)}
    return check(acked, recorded, set(payment_keys), effects, states(ledger, payment_keys))


@dataclass
class Outcome:
    """What a storm through a fault left behind, for asserts and for the report."""

    found: Findings
    states: Counter[str]
    statuses: Counter[int]
    calls: Counter[str]
    """Downstream calls per payment (the non-deduplicating one; empty for SQLite)."""

    def summary(self) -> str:
        twice = sum(1 for n in self.calls.values() if n > 1)
        return (
            f"answers {dict(self.statuses)}; states {dict(self.states)}; lost "
            f"{len(self.found.lost)}; duplicated {len(self.found.duplicated)}; interrupted "
            f"{len(self.found.interrupted)}; payments called twice {twice}"
        )


def storm_through(
    service: Service,
    paid: list[list[dict[str, Any]]],
    sent: list[dict[str, Any]],
    fault: Callable[[Storm], None],
    downstream: CountingDownstream | None = None,
) -> Outcome:
    """Send ``sent`` like Stripe while ``fault`` runs, then :func:`after_storm`."""
    storm = Storm(service.web.url, sent, SECRET).start()
    fault(storm)
    storm.join()
    return after_storm(service, paid, storm, downstream)


def after_storm(
    service: Service,
    paid: list[list[dict[str, Any]]],
    storm: Storm,
    downstream: CountingDownstream | None = None,
) -> Outcome:
    """Wait until every payment settles, then check the current primary against what was
    acknowledged and called."""
    assert storm.unanswered() == [], "every delivery is acknowledged in the end"
    payment_keys = [str(p[0]["data"]["object"]["id"]) for p in paid]
    settled = settle(service, payment_keys)
    calls = Counter(downstream.calls) if downstream is not None else Counter()
    effects = dict(calls) if downstream is not None else service.downstream_effects()
    found = checked(service, storm, payment_keys, effects)
    outcome = Outcome(found, Counter(settled.values()), storm.statuses, calls)
    print(f"\n{outcome.summary()}")
    return outcome


def start_service(
    cluster: Cluster, workdir: Path, exits: ExitStack, replicas: int, replay_safe: bool
) -> tuple[Service, CountingDownstream | None]:
    """The service with LEDGER_MIN_REPLICAS=``replicas``: the built-in SQLite action
    (replay-safe, dedupes), or an HTTP downstream that counts every call and never dedupes
    with the default FULFILMENT_REPLAY_SAFE=false."""
    extra = {"LEDGER_MIN_REPLICAS": str(replicas)}
    downstream = None
    if not replay_safe:
        downstream = exits.enter_context(CountingDownstream())
        extra["FULFILMENT_ACTION"] = downstream.url
    return Service(cluster, workdir, exits, **extra), downstream


class Probe:
    """One delivery written straight to one node, not through Sentinel, on a connection
    opened before that node froze: what a web process still waiting on an old primary
    gets once it resumes."""

    def __init__(self, port: int, replicas: int, rng: random.Random) -> None:
        self.port = port
        self.redis = Redis(port=port, socket_timeout=30)
        self.client_port = int(self.redis.client_info()["addr"].rsplit(":", 1)[1])
        s = settings.load(
            {},
            REDIS_URL=f"redis://127.0.0.1:{port}/0",
            REDIS_SOCKET_TIMEOUT=30.0,
            LEDGER_MIN_REPLICAS=replicas,
            STRIPE_MODE="test",
        )
        self.ledger = Ledger(self.redis, s)
        # Loaded now: the script itself is all that is left to send to the frozen node.
        self.ledger.record_script.load()
        self.event = samples.payment_events(rng)[0]  # not a paid one: no RQ job to build
        self.answer: Recorded | LedgerUnavailable | None = None
        self.thread = threading.Thread(target=self._send, daemon=True)

    def _send(self) -> None:
        body = samples.encode(self.event)
        try:
            self.answer = self.ledger.record_delivery(delivery(self.event, body))
        except LedgerUnavailable as exc:
            self.answer = exc

    def send(self) -> None:
        """Send it to the frozen node: until its bytes wait in that node's socket."""
        self.thread.start()
        wait_until(lambda: queued_bytes(self.port, self.client_port), 10, 0.01, "probe queued")

    def result(self) -> Recorded | LedgerUnavailable | None:
        self.thread.join(60)
        self.redis.close()
        return self.answer
