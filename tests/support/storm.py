"""Deliveries sent the way Stripe sends them, for the failover tests and benchmark: many at
once, each sent again after any answer but a 2xx (or none) until it is acknowledged."""

import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import requests

from ledgerctl import samples
from tests.support.helpers import signed_headers


@dataclass(frozen=True)
class Answer:
    event_id: str
    status: int
    """0: no answer (refused, reset, timed out)."""
    at: float
    """time.monotonic() when it came."""


def payments(rng: random.Random, n: int) -> list[list[dict[str, Any]]]:
    """``n`` card payments (3 events, two of them paid), every other one with Checkout (a
    third paid event)."""
    return [samples.payment_events(rng, checkout=bool(i % 2)) for i in range(n)]


def deliveries(rng: random.Random, paid: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every event once, a quarter of them twice (Stripe's duplicates), shuffled."""
    events = [e for payment in paid for e in payment]
    sent = events + [e for e in events if rng.random() < 0.25]
    rng.shuffle(sent)
    return sent


class Storm:
    """Sends ``events`` to ``url`` from ``senders`` threads until each is acknowledged or
    ``give_up`` seconds have passed; every answer is kept in order of arrival."""

    def __init__(
        self,
        url: str,
        events: list[dict[str, Any]],
        secret: str,
        senders: int = 8,
        give_up: float = 120,
    ) -> None:
        self.url, self.events, self.secret = url, events, secret
        self.senders, self.give_up = senders, give_up
        self.answers: list[Answer] = []
        self.progress = threading.Condition()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.deadline = 0.0

    def start(self) -> "Storm":
        self.deadline = time.monotonic() + self.give_up
        self.thread.start()
        return self

    def _run(self) -> None:
        with ThreadPoolExecutor(self.senders) as pool:
            list(pool.map(self._deliver, self.events))
        with self.progress:
            self.progress.notify_all()

    def _deliver(self, event: dict[str, Any]) -> None:
        body = samples.encode(event)
        while time.monotonic() < self.deadline:
            status = post(self.url, body, self.secret)
            with self.progress:
                self.answers.append(Answer(event["id"], status, time.monotonic()))
                self.progress.notify_all()
            if 200 <= status < 300:
                return
            time.sleep(0.1)  # Stripe waits longer; the test has no time to

    def wait_answers(self, n: int, timeout: float = 120) -> None:
        """Until ``n`` answers (of any kind) have come."""
        with self.progress:
            if not self.progress.wait_for(lambda: len(self.answers) >= n, timeout):
                raise AssertionError(f"{len(self.answers)} answers of {n} after {timeout} s")

    def wait_for(self, predicate: Any, timeout: float = 120) -> None:
        """Until ``predicate(answers)`` holds."""
        with self.progress:
            if not self.progress.wait_for(lambda: predicate(self.answers), timeout):
                raise AssertionError(f"storm: condition not met after {timeout} s")

    def join(self) -> None:
        self.thread.join(self.give_up + 30)
        assert not self.thread.is_alive(), "the storm did not end"

    @property
    def acked(self) -> dict[str, int]:
        """2xx answers per event id."""
        return dict(Counter(a.event_id for a in self.answers if 200 <= a.status < 300))

    @property
    def statuses(self) -> Counter[int]:
        return Counter(a.status for a in self.answers)

    def unanswered(self) -> list[str]:
        """Event ids never acknowledged."""
        acked = self.acked
        return sorted({e["id"] for e in self.events} - set(acked))


def post(url: str, body: bytes, secret: str) -> int:
    """One delivery signed now, as Stripe sends it; its status (0: no answer)."""
    headers = signed_headers(body, secret)
    try:
        return requests.post(
            f"{url}/webhooks/stripe", data=body, headers=headers, timeout=15
        ).status_code
    except requests.RequestException:
        return 0


def unavailable_window(answers: list[Answer], after: float) -> float | None:
    """Seconds from the first answer that was not a 2xx at or after ``after`` to the first
    2xx after it (None when every answer after ``after`` was a 2xx)."""
    later = [a for a in answers if a.at >= after]
    first_bad = next((a for a in later if not 200 <= a.status < 300), None)
    if first_bad is None:
        return None
    back = next((a for a in later if a.at > first_bad.at and 200 <= a.status < 300), None)
    return None if back is None else back.at - first_bad.at
