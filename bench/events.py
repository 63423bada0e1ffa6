"""Realistic signed Stripe events for the benchmarks, fast enough to make 100,000.

Base payments come from ``ledgerctl.samples.payment_events`` (real test-mode payloads,
pretty-printed as Stripe sends them, 2-6 KB each). Further payments are clones of a
base payment with every generated id (evt_, pi_, ch_, pm_, txn_, cs_, cus_, req_)
replaced by a fresh random id of the same length, consistently across the payment's
events, so the payment key still groups them. That is ~20 us an event instead of
~270 us, with the same structure, sizes and compressibility.

Pool files hold pre-signed requests for the load generators (wrk's Lua script and
bench/paced.py): a header line ``WLPOOL <count>`` then, per request,
``<len(signature)> <len(body)>\\n<signature><body>``.
"""

import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ledgerctl import samples

ID_RE = re.compile(
    rb"(?<![0-9A-Za-z_])(?:evt|pi|ch|pm|txn|cs_test|cs_live|cus|req|in|sub|py|src|seti|re)"
    rb"_[0-9A-Za-z]{10,}(?![0-9A-Za-z])"
)
_ALPHABET = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_PK_RE = re.compile(rb'"(?:payment_intent|id)": "(pi_[0-9A-Za-z]+)"')


@dataclass(frozen=True)
class Payment:
    key: str
    bodies: list[bytes]


class EventFactory:
    """Distinct realistic payments: Stripe's events for one card payment, in order."""

    def __init__(self, seed: int = 20261202, bases: int = 120) -> None:
        self.rng = random.Random(seed)
        self.bases: list[tuple[list[bytes], list[bytes]]] = []
        for i in range(bases):
            # Every other payment went through Checkout (4 events), the rest 3.
            events = samples.payment_events(self.rng, checkout=i % 2 == 0)
            bodies = [samples.encode(e) for e in events]
            tokens = {t for b in bodies for t in ID_RE.findall(b)}
            live = sorted((t for t in tokens if t.rpartition(b"_")[2].strip(b"0")), key=len)
            self.bases.append((bodies, live[::-1]))

    def payment(self) -> Payment:
        bodies, tokens = self.bases[self.rng.randrange(len(self.bases))]
        for token in tokens:
            prefix, _, tail = token.rpartition(b"_")
            fresh = prefix + b"_" + bytes(self.rng.choices(_ALPHABET, k=len(tail)))
            bodies = [b.replace(token, fresh) for b in bodies]
        match = _PK_RE.search(bodies[-1])
        key = match.group(1).decode() if match else ""
        return Payment(key, bodies)

    def payments(self, n: int) -> list[Payment]:
        return [self.payment() for _ in range(n)]

    def events(self, n: int) -> list[bytes]:
        """At least ``n`` event bodies, whole payments in Stripe's order, cut at ``n``."""
        out: list[bytes] = []
        while len(out) < n:
            out.extend(self.payment().bodies)
        return out[:n]


def sign_all(bodies: list[bytes], secret: str, timestamp: int | None = None) -> list[str]:
    stamp = timestamp or int(time.time())
    return [samples.sign(b, secret, stamp) for b in bodies]


def write_pool(path: Path, bodies: list[bytes], secret: str) -> float:
    """Sign every body now and write the pool file; returns the signing time (epoch s)."""
    stamp = int(time.time())
    sigs = sign_all(bodies, secret, stamp)
    with open(path, "wb") as out:
        out.write(f"WLPOOL {len(bodies)}\n".encode())
        for sig, body in zip(sigs, bodies, strict=True):
            raw = sig.encode()
            out.write(f"{len(raw)} {len(body)}\n".encode())
            out.write(raw)
            out.write(body)
    return stamp


class Pool:
    """A pool file that is re-signed when its signatures get close to the tolerance."""

    MAX_AGE = 180.0  # seconds; Stripe's (and our) tolerance is 300

    def __init__(self, path: Path, bodies: list[bytes], secret: str) -> None:
        self.path = path
        self.bodies = bodies
        self.secret = secret
        self.signed_at = 0.0

    def fresh(self) -> Path:
        if time.time() - self.signed_at > self.MAX_AGE:
            self.signed_at = write_pool(self.path, self.bodies, self.secret)
        return self.path

    @property
    def mean_bytes(self) -> float:
        return sum(map(len, self.bodies)) / len(self.bodies)
