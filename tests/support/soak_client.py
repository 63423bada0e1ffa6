"""The soak's traffic (scripts/soak.py): a client that sends deliveries like Stripe (anything
not answered 2xx is sent again later), batches of whole payments with their copies,
refunds and disputes, and the wait until every payment settles."""

import argparse
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import requests
from redis import Redis

from ledger import keys
from ledgerctl import samples
from tests.support.soak_refunds import SETTLED, Refunds


class Client:
    """Sends deliveries like Stripe: anything not answered 2xx is retried later."""

    def __init__(self, url: str, secret: str) -> None:
        self.url, self.secret = url, secret
        self.acked: Counter[str] = Counter()
        self.sent = 0
        self.statuses: Counter[str] = Counter()
        self.pending: list[tuple[str, bytes]] = []
        self.paid: set[str] = set()
        self.refunds = Refunds()
        self.lock = threading.Lock()
        self.session = threading.local()

    def post(self, event_id: str, body: bytes) -> None:
        session = getattr(self.session, "s", None) or requests.Session()
        self.session.s = session
        headers = {
            "Content-Type": "application/json",
            "Stripe-Signature": samples.sign(body, self.secret),
        }
        try:
            status = session.post(self.url, data=body, headers=headers, timeout=10).status_code
        except requests.RequestException:
            status = 0
        with self.lock:
            self.sent += 1
            self.statuses[str(status)] += 1
            if 200 <= status < 300:
                self.acked[event_id] += 1
            else:
                self.pending.append((event_id, body))

    def retry_pending(self) -> None:
        with self.lock:
            pending, self.pending = self.pending, []
        for event_id, body in pending:
            self.post(event_id, body)


def traffic(client: Client, rng: random.Random, until: float, args: argparse.Namespace) -> None:
    """Batches of payments at about ``args.rate`` payments per second until ``until``."""
    with ThreadPoolExecutor(args.concurrency) as pool:
        while time.monotonic() < until:
            began = time.monotonic()
            plan = client.refunds.due()  # the last batch's refunds and disputes
            for _ in range(args.batch):
                events = samples.payment_events(rng, checkout=rng.random() < 0.5)
                client.paid.add(str(events[0]["data"]["object"]["id"]))
                plan += [(e["id"], samples.encode(e)) for e in events]
                plan += client.refunds.plan(rng, events)
            plan = [item for item in plan for _ in range(rng.randint(1, args.copies))]
            rng.shuffle(plan)
            list(pool.map(lambda item: client.post(*item), plan))
            client.retry_pending()
            time.sleep(max(0.0, args.batch / args.rate - (time.monotonic() - began)))
        list(pool.map(lambda item: client.post(*item), client.refunds.due()))


def settle(client: Client, redis_url: str, timeout: float) -> dict[str, str]:
    """Re-send until everything is acknowledged, then wait until every payment settles."""
    deadline = time.monotonic() + timeout
    while client.pending and time.monotonic() < deadline:
        client.retry_pending()
        time.sleep(0.5)
    redis = Redis.from_url(redis_url)
    pks = sorted(client.paid)
    while True:
        pipe = redis.pipeline(transaction=False)
        for pk in pks:
            pipe.hget(keys.payment(pk), "state")
        states = {pk: (s or b"").decode() for pk, s in zip(pks, pipe.execute(), strict=True)}
        if all(s in SETTLED for s in states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(0.5)
