"""Every Lua script is all or nothing: Redis does not roll back a script that fails half-way,
so each checks its arguments before its first write. Each script is driven with hostile
arguments (wrong types, missing ones, conflicting ids); whenever it errors, a full dump of
the database must equal the dump taken before the call."""

import random
from typing import Any

import pytest
from redis import Redis
from redis.exceptions import ResponseError

from ledger.attempts import Attempts
from ledger.deliveries import API_SOURCE, Delivery, Ledger, new_request_id
from ledger.events import classify
from ledgerctl import samples
from tests.integration.test_purchases import ledger_for, record

HOSTILE = ("abc", "", "-1", "1e999", "nan", "{", "0 1", "\xff")
Captured = dict[str, list[tuple[list[Any], list[Any]]]]


def capture(ledger: Ledger, attempts: Attempts) -> Captured:
    """Keep the positional keys and arguments of each script's real calls, as Redis got them."""
    calls: Captured = {}
    scripts = [ledger.record_script, ledger.reject_script, *attempts.scripts.values()]
    for script in scripts:
        run = script.run

        def keep(keys: list[Any], args: list[Any], script: Any = script, run: Any = run) -> Any:
            name = script.name
            at = script.arg_names.index("source") if name == "record_delivery" else -1
            if at >= 0 and args[at : at + 1] == [API_SOURCE]:
                name = "record_delivery_api"
            calls.setdefault(name, []).append((list(keys), list(args)))
            return run(keys, args)

        script.run = keep  # type: ignore[method-assign]
    return calls


def drive(ledger: Ledger, attempts: Attempts, rng: random.Random) -> None:
    """One of each transition, with real arguments."""
    event = samples.payment_events(rng)[2]
    record(ledger, event)
    found = samples.payment_events(rng)[2]  # found through the Events API by reconcile
    c = classify(found, ledger.settings.policy)
    ledger.record_delivery(Delivery(found, b"{}", c, "", API_SOURCE, new_request_id()))
    pk = event["data"]["object"]["id"]
    ledger.record_rejection("signature_mismatch", {"status": 400})
    start = attempts.start(pk, "job-1", replay_safe=False)
    attempts.mark_calling(pk, start.token)
    attempts.finish(pk, start.token, "interrupted", "reset", 12.0)
    attempts.recover(pk)
    attempts.decide(pk, "fulfilled", ("interrupted",), "test")
    attempts.purge()


def dump(redis: Redis) -> dict[bytes, bytes | None]:
    return {key: redis.dump(key) for key in sorted(redis.scan_iter(count=1000))}


def restore(redis: Redis, snapshot: dict[bytes, bytes | None]) -> None:
    redis.flushdb()
    for key, value in snapshot.items():
        if value is not None:
            redis.restore(key, 0, value)


def variants(args: list[Any]) -> list[list[Any]]:
    """Each argument replaced by each hostile value, and the list cut short."""
    out = [args[:cut] for cut in range(len(args))]
    for i in range(len(args)):
        out += [[*args[:i], bad, *args[i + 1 :]] for bad in HOSTILE]
    return out


SCRIPTS = (
    "record_delivery",
    "record_delivery_api",
    "record_rejection",
    "start_attempt",
    "mark_calling",
    "finish_attempt",
    "recover",
    "operator",
    "purge",
)


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_failing_script_writes_nothing(name: str, redis: Redis, redis_server, rng) -> None:
    ledger = ledger_for(redis_server.url, PAYMENT_RETENTION_DAYS=31)
    attempts = Attempts(ledger.redis, ledger.settings)
    calls = capture(ledger, attempts)
    drive(ledger, attempts, rng)
    assert name in calls, f"{name} was not driven"
    keys, args = calls[name][0]
    state = dump(redis)
    scripts = {s.name: s for s in (ledger.record_script, ledger.reject_script)}
    script = scripts.get(name.removesuffix("_api")) or attempts.scripts[name]
    errors = 0
    for n, bad in enumerate(variants(args)):
        if "request" in script.key_names:  # a new request each time, not a retry
            keys[script.key_names.index("request")] = f"wl:req:hostile-{n}"
        try:
            script.run(keys, bad)
        except ResponseError:
            errors += 1
            assert dump(redis) == state, f"{name} wrote before failing on {bad!r}"
        else:  # it wrote, as it may: back to the state before the call
            restore(redis, state)
    assert errors, f"no hostile argument made {name} fail: the check proves nothing"


def test_a_conflicting_copy_answers_and_keeps_the_ledger_whole(
    redis: Redis,
    redis_server,
    rng,
) -> None:
    """Regression (503 'bad argument #1 to gsub' after the counters were bumped): the same
    event id with a paid body for another PaymentIntent."""
    ledger = ledger_for(redis_server.url)
    event = samples.payment_events(rng)[2]
    record(ledger, event)
    other = {**event, "data": {"object": {**event["data"]["object"], "id": "pi_other"}}}
    answer = record(ledger, other)
    assert answer.conflict and answer.payment_key == event["data"]["object"]["id"]
    assert not redis.exists("wl:pay:pi_other")
