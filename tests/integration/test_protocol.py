"""The protocol explorer (tests/support/protocol/ says what it drives and checks): hypothesis
runs ``Protocol``'s programs on a real Redis. PROTOCOL_PROGRAMS, PROTOCOL_STEPS,
PROTOCOL_SEED and PROTOCOL_REPORT set its budget, its programs and its report."""

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, seed, settings
from hypothesis.stateful import run_state_machine_as_test
from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from tests.support.processes import RedisServer
from tests.support.protocol.constants import PROGRAMS, STEPS, TALLY
from tests.support.protocol.machine import Protocol


@pytest.mark.timeout(max(3600, PROGRAMS))  # the budget is PROTOCOL_PROGRAMS; CI's: a minute
def test_the_protocol_keeps_its_invariants(protocol_redis: RedisServer) -> None:
    TALLY.clear()
    started = time.monotonic()
    Protocol.server = protocol_redis
    # A restarted Redis answers LOADING until it has replayed its file: wait it out.
    Protocol.redis = Redis.from_url(
        protocol_redis.url,
        retry=Retry(ExponentialBackoff(cap=0.5), 50),
        retry_on_error=[BusyLoadingError, RedisConnectionError],
    )
    chosen = os.environ.get("PROTOCOL_SEED")  # else derandomized: CI runs the same programs
    run_state_machine_as_test(
        seed(int(chosen))(Protocol) if chosen else Protocol,
        settings=settings(
            max_examples=PROGRAMS,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=chosen is None,
        ),
    )
    if report := os.environ.get("PROTOCOL_REPORT"):
        done = {**TALLY, "seconds": round(time.monotonic() - started, 1)}
        Path(report).write_text(json.dumps({**done, "seed": chosen}))
    assert TALLY["programs"] >= PROGRAMS and TALLY["steps"] > TALLY["programs"]
