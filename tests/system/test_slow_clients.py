"""Slow clients cannot stop intake: 200 connections trickling a body and 50 trickling headers,
a byte a second each, while signed deliveries are answered within 1 s (webhook/server.py).

A body still incomplete after BODY_READ_TIMEOUT (10 s, the default) is answered 408 and
counted; headers still incomplete after gunicorn's keep-alive timeout (5 s) are dropped.
"""

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import requests
from redis import Redis

from tests.support.helpers import in_background, paid_event, signed_headers, stats

BODY_TRICKLERS = 200
HEADER_TRICKLERS = 50
ROUNDS = 6
"""Seconds of trickling: the deliveries are sent while every body trickler is open."""
DELIVERIES_PER_ROUND = 2
BODY_HEAD = (
    b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Stripe-Signature: t=1,v1=00\r\nContent-Length: 100000\r\n\r\n"
)
HEADER_START = b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n"


class Tricklers:
    """Loopback connections from this process, each sent a byte a second by one thread."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.bodies = [self.connect(BODY_HEAD) for _ in range(BODY_TRICKLERS)]
        self.headers = [self.connect(HEADER_START) for _ in range(HEADER_TRICKLERS)]
        self.rounds, self.body_errors = 0, 0
        self.round_done = threading.Condition()
        self.stop = threading.Event()

    def connect(self, first: bytes) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        sock.sendall(first)
        return sock

    def trickle(self) -> None:
        for _ in range(ROUNDS):
            for sock in self.bodies:
                try:
                    sock.send(b" ")
                except OSError:
                    self.body_errors += 1
            for i, sock in enumerate(self.headers):
                try:
                    sock.send(b"X")
                except OSError:  # dropped at its header deadline: an attacker comes back
                    sock.close()
                    self.headers[i] = self.connect(HEADER_START)
            with self.round_done:
                self.rounds += 1
                self.round_done.notify_all()
            if self.stop.wait(1.0):  # the attack's own pace, a byte a second
                return

    @contextmanager
    def running(self) -> Iterator["Tricklers"]:
        with in_background(self.trickle, self.stop):
            yield self

    def wait_for_round(self, n: int) -> None:
        with self.round_done:
            assert self.round_done.wait_for(lambda: self.rounds >= n, timeout=30)

    def body_answers(self) -> Counter:
        """The status each body trickler was answered with, read until the server closes."""
        statuses: Counter = Counter()
        for sock in self.bodies:
            raw = b""
            while piece := sock.recv(65536):
                raw += piece
            statuses[raw.split(b" ", 2)[1].decode() if raw else "closed"] += 1
        return statuses

    def headers_closed_unanswered(self) -> bool:
        """Whether the server closed every header trickler without answering it."""
        for sock in self.headers:
            try:
                if sock.recv(65536):
                    return False
            except ConnectionResetError:  # closed, then reset by the bytes sent after
                pass
        return True

    def close(self) -> None:
        for sock in self.bodies + self.headers:
            sock.close()


def test_slow_clients_do_not_stop_signed_deliveries(web, redis: Redis, rng) -> None:
    tricklers = Tricklers(web.port)
    latencies, statuses = [], []
    try:
        with tricklers.running():
            for n in range(1, ROUNDS):
                tricklers.wait_for_round(n)
                for _ in range(DELIVERIES_PER_ROUND):
                    _, body = paid_event(rng)
                    started = time.monotonic()
                    answer = requests.post(
                        f"{web.url}/webhooks/stripe",
                        data=body,
                        headers=signed_headers(body),
                        timeout=10,
                    )
                    latencies.append(time.monotonic() - started)
                    statuses.append(answer.status_code)
        assert statuses == [200] * (ROUNDS - 1) * DELIVERIES_PER_ROUND
        assert max(latencies) < 1.0, latencies
        assert tricklers.body_errors == 0  # every body trickler was open throughout
        assert tricklers.body_answers() == Counter({"408": BODY_TRICKLERS})
        assert tricklers.headers_closed_unanswered()
    finally:
        tricklers.close()
    assert stats(redis)["rejected:body_timeout"] == BODY_TRICKLERS
    assert stats(redis)["deliveries"] == len(statuses)
