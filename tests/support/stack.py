"""A whole service for a test: gunicorn + RQ workers + sweeper sharing one environment."""

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from redis import Redis

from tests.support.helpers import signed_headers
from tests.support.processes import Gunicorn, RqWorker, Sweeper, service_env
from tests.support.stopping import Group

FAST = {
    "LEASE_SECONDS": "3",
    "FULFILMENT_TIMEOUT": "1",
    "RETRY_BASE_SECONDS": "0.1",
    "SWEEP_INTERVAL": "0.1",
    "QUEUED_GRACE_SECONDS": "1",
}
ROOMY = {"FULFILMENT_TIMEOUT": "5", "LEASE_SECONDS": "12"}
"""For a test whose downstream is served from its own busy process (many sender threads)
and whose call deadline is not what it proves: a late answer is not an interrupted call."""


class Stack:
    """gunicorn + workers + sweeper sharing one env; each part can be started on its own."""

    def __init__(self, env: dict[str, str], logs: Path, parts: Group) -> None:
        self.env, self.logs, self.parts = env, logs, parts
        self.web: Gunicorn | None = None

    def start_web(self, **extra: str) -> Gunicorn:
        env = {**self.env, **extra}
        self.web = self.parts.add(Gunicorn(env, workers=2, log=self.logs / "web.log")).start()
        return self.web

    def start_worker(self, worker_class: str = "rq.worker.SimpleWorker", **extra: str) -> RqWorker:
        env = {**self.env, **extra}
        worker = RqWorker(env, log=self.logs / "worker.log", worker_class=worker_class)
        return self.parts.add(worker).start()

    def start_sweeper(self, **extra: str) -> Sweeper:
        sweeper = Sweeper({**self.env, **extra}, log=self.logs / "sweeper.log")
        return self.parts.add(sweeper).start()

    def start_service(self, workers: int = 2) -> Gunicorn:
        """The web process, ``workers`` RQ workers and the sweeper; the web process."""
        web = self.start_web()
        for _ in range(workers):
            self.start_worker()
        self.start_sweeper()
        return web

    def send(self, body: bytes) -> requests.Response:
        assert self.web is not None
        return requests.post(
            f"{self.web.url}/webhooks/stripe", data=body, headers=signed_headers(body), timeout=30
        )


@pytest.fixture
def stack(
    config: dict[str, object], redis: Redis, tmp_path: Path
) -> Iterator[Callable[..., Stack]]:
    parts = Group()  # every part of every stack of the test, stopped together after it

    def make(**extra: str) -> Stack:
        env = service_env(str(config["REDIS_URL"]), {k: str(v) for k, v in config.items()})
        return Stack({**env, **FAST, **extra}, tmp_path, parts)

    try:
        yield make
    finally:
        parts.stop()
