"""Sending: signed fresh per request, in the shape asked for (copies, order, concurrency,
delays, Stripe's retry schedule), with forged probes mixed in; with ``retry``, a valid
delivery not answered 2xx is sent again on Stripe's schedule, compressed, as Stripe would."""

import random
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ledger import limits
from ledger.settings import Settings
from ledgerctl import samples
from ledgerctl.replay.client import Poster, Reply

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
    reason: str = ""
    """The service's reason for a refusal (``signature_mismatch``)."""
    location: str = ""
    """Where a 3xx pointed (never followed)."""
    final: bool = True
    """The last try of its delivery (earlier tries were answered non-2xx and sent again)."""

    @property
    def acked(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True)
class Shape:
    """How the plan is sent: threads, pauses, and Stripe-like retries (``retry``: each valid
    delivery not answered 2xx is sent again at Stripe's offsets divided by ``compress``)."""

    concurrency: int = 1
    delay: float = 0.0
    jitter: float = 0.0
    retry: bool = False
    compress: float = 3600.0
    deadline: float = 30.0
    """Seconds one request may take in all (connect, send, answer)."""


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
    shape: Shape,
    tolerance: int = Settings.STRIPE_WEBHOOK_TOLERANCE,
    on_answer: Callable[[Answer], None] | None = None,
    rng: random.Random | None = None,
) -> list[Answer]:
    """Send every planned delivery (and its retries); returns every answer, each delivery's
    tries in order."""
    local = threading.local()
    rng = rng or random.Random()
    started = time.monotonic()
    jitters = [rng.uniform(0, shape.jitter) if shape.jitter else 0.0 for _ in plan.deliveries]
    retries = STRIPE_SCHEDULE[1:] if shape.retry else ()

    def send(index: int) -> list[Answer]:
        planned = plan.deliveries[index]
        wait = planned.at - (time.monotonic() - started)
        time.sleep(max(0.0, wait) + shape.delay + jitters[index])
        poster = getattr(local, "poster", None) or Poster(url, shape.deadline)
        local.poster = poster
        first = time.monotonic()
        tries = [_try(poster, planned, secret, run_id, tolerance)]
        for offset in retries if planned.kind == "valid" else ():
            if tries[-1].acked:
                break
            tries[-1].final = False
            time.sleep(max(0.0, first + offset / shape.compress - time.monotonic()))
            tries.append(_try(poster, planned, secret, run_id, tolerance))
        if on_answer:
            for answer in tries:
                on_answer(answer)
        return tries

    order = sorted(range(len(plan.deliveries)), key=lambda i: plan.deliveries[i].at)
    with ThreadPoolExecutor(max(1, shape.concurrency)) as pool:
        return [answer for tries in pool.map(send, order) for answer in tries]


def _try(poster: Poster, planned: Planned, secret: str, run_id: str, tolerance: int) -> Answer:
    """One request, signed now (as Stripe signs each try afresh)."""
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "User-Agent": STRIPE_UA,
        "Stripe-Signature": sign_for(planned, secret, tolerance),
        limits.REPLAY_HEADER: run_id,
    }
    began = time.perf_counter()
    reply: Reply = poster.post(planned.body, headers)
    ms = (time.perf_counter() - began) * 1000
    return Answer(
        planned.event_id, planned.kind, reply.status, ms, reply.error, reply.reason, reply.location
    )
