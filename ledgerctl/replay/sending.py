"""Sending: signed fresh per request, in the shape asked for (copies, order, concurrency,
delays, Stripe-like retry schedule), with forged probes mixed in."""

import random
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import requests

from ledger import defaults
from ledgerctl import samples

STRIPE_UA = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"
# Stripe retries over three days with exponential backoff (seconds after the first try).
STRIPE_SCHEDULE = (0, 60, 300, 1800, 3600, 7200, 14400, 28800, 57600, 86400, 172800, 259200)
PROBES = ("bad-signature", "stale", "wrong-secret")


@dataclass(frozen=True)
class Planned:
    event_id: str
    body: bytes
    kind: str  # "valid" or one of PROBES
    at: float = 0.0  # seconds after the start (stripe-retries mode)


@dataclass
class Answer:
    event_id: str
    kind: str
    status: int
    ms: float
    error: str = ""


@dataclass
class Plan:
    deliveries: list[Planned] = field(default_factory=list)

    def add_copies(
        self, items: list[tuple[dict[str, Any], bytes]], copies: int, retries: int, factor: float
    ) -> None:
        for event, body in items:
            if retries:
                for offset in STRIPE_SCHEDULE[:retries]:
                    self.deliveries.append(Planned(event["id"], body, "valid", offset / factor))
            else:
                self.deliveries += [Planned(event["id"], body, "valid")] * copies

    def add_probes(
        self, items: list[tuple[dict[str, Any], bytes]], kind: str, count: int, rng: random.Random
    ) -> None:
        for _ in range(count):
            event, body = rng.choice(items)
            self.deliveries.append(Planned(event["id"], body, kind))


def sign_for(planned: Planned, secret: str, tolerance: int) -> str:
    """A signature header for the kind of delivery: valid or one of the forged probes."""
    if planned.kind == "wrong-secret":
        return samples.sign(planned.body, "whsec_" + secrets.token_hex(16))
    if planned.kind == "stale":
        return samples.sign(planned.body, secret, int(time.time()) - tolerance - 60)
    header = samples.sign(planned.body, secret)
    if planned.kind == "bad-signature":
        stamp, _, _ = header.partition(",v1=")
        return f"{stamp},v1={secrets.token_hex(32)}"
    return header


def send_all(
    plan: Plan,
    url: str,
    secret: str,
    run_id: str,
    concurrency: int,
    delay: float = 0.0,
    jitter: float = 0.0,
    tolerance: int = defaults.STRIPE_WEBHOOK_TOLERANCE,
    on_answer: Callable[[Answer], None] | None = None,
    rng: random.Random | None = None,
) -> list[Answer]:
    """Send every planned delivery; returns the answers in completion order."""
    local = threading.local()
    rng = rng or random.Random()
    started = time.monotonic()
    jitters = [rng.uniform(0, jitter) if jitter else 0.0 for _ in plan.deliveries]

    def send(index: int) -> Answer:
        planned = plan.deliveries[index]
        wait = planned.at - (time.monotonic() - started)
        time.sleep(max(0.0, wait) + delay + jitters[index])
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        headers = {
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": STRIPE_UA,
            "Stripe-Signature": sign_for(planned, secret, tolerance),
            defaults.REPLAY_HEADER: run_id,
        }
        began = time.perf_counter()
        try:
            response = session.post(url, data=planned.body, headers=headers, timeout=30)
            answer = Answer(planned.event_id, planned.kind, response.status_code, 0.0)
        except requests.RequestException as exc:
            answer = Answer(planned.event_id, planned.kind, 0, 0.0, type(exc).__name__)
        answer.ms = (time.perf_counter() - began) * 1000
        if on_answer:
            on_answer(answer)
        return answer

    order = sorted(range(len(plan.deliveries)), key=lambda i: plan.deliveries[i].at)
    with ThreadPoolExecutor(max(1, concurrency)) as pool:
        return list(pool.map(send, order))
