"""record_delivery runs as a Redis Function (ledger/scripts.py, FUNCTIONS): loaded once per
server, called with FCALL, and loaded again on a server that lacks it, as a Redis restarted
without persistence or a replica promoted without the library would, on a lone call and in
the pipeline that WAITs for replicas (ledger/replication.py)."""

import random

import pytest
from redis import Redis

from ledger import keys, settings
from ledger.deliveries import Ledger, LedgerUnavailable
from ledger.scripts import Script, library
from ledgerctl import samples
from tests.integration.test_lua_purchases import record


def calls(redis: Redis, command: str) -> int:
    return int(redis.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def libraries(redis: Redis) -> list[str]:
    names = [
        dict(zip(lib[::2], lib[1::2], strict=True))[b"library_name"]
        for lib in redis.function_list()
    ]
    return [name.decode() for name in names]


def test_a_delivery_is_an_fcall_and_a_server_without_the_function_is_given_it_again(
    redis: Redis, rng: random.Random
) -> None:
    ledger = Ledger(redis, settings.load({}, STRIPE_MODE="test"))
    redis.function_flush()
    redis.config_resetstat()
    first, second = samples.payment_events(rng)[:2]
    assert record(ledger, first).deliveries == 1
    function = library("record_delivery")[1]
    assert libraries(redis) == [f"wl_{function}"]
    assert calls(redis, "fcall") == 2 and calls(redis, "evalsha") == 0  # one refused, one ran
    redis.function_flush()  # what a restart without persistence leaves
    assert record(ledger, second).deliveries == 1
    assert record(ledger, second).deliveries == 2
    assert libraries(redis) == [f"wl_{function}"]
    assert calls(redis, "function|load") == 2


def test_the_pipeline_that_waits_for_replicas_loads_a_missing_function_and_records_once(
    redis: Redis, rng: random.Random
) -> None:
    """LEDGER_MIN_REPLICAS=1 with no replica: FCALL and WAIT in one pipeline, the function
    loaded in between; the delivery is written once and reported unconfirmed."""
    s = settings.load({}, STRIPE_MODE="test", LEDGER_MIN_REPLICAS=1, LEDGER_WAIT_TIMEOUT=0.05)
    ledger = Ledger(redis, s)
    redis.function_flush()
    event = samples.payment_events(rng)[0]
    with pytest.raises(LedgerUnavailable, match="confirmed by 0 of 1"):
        record(ledger, event)
    assert redis.hget(keys.event(event["id"]), "n") == b"1"
    assert ledger.record_script.function in str(redis.function_list())


def test_two_versions_of_the_library_live_side_by_side(redis: Redis) -> None:
    """A rolling deploy: an old process's function stays while a new one is loaded."""
    redis.function_flush()
    ours = Script(redis, "record_delivery")
    other = Script(redis, "record_delivery", clock_key="wl:test:clock")
    assert ours.function != other.function
    ours.load()
    other.load()
    ours.load()  # already there: kept
    assert len(libraries(redis)) == 2
