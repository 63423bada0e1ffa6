"""Every Lua script is all or nothing: Redis does not roll back a script that fails half-way,
so each checks its arguments before its first write. Each script is driven with hostile
arguments (wrong types, missing ones, conflicting ids); whenever it errors, a full dump of
the database must equal the dump taken before the call."""

import random
from typing import Any

import pytest
from redis import Redis
from redis.exceptions import ResponseError

from ledger import keys, limits
from ledger.attempts import Attempts
from ledger.deliveries import API_SOURCE, Delivery, Ledger, new_request_id
from ledger.events import classify
from ledger.gate import Gate, Health
from ledger.scripts import Script
from ledger.settings import SettingsError
from ledgerctl import samples
from tests.integration.test_lua_purchases import ledger_for, record

TOO_LONG = str(10**12 * 86400)
"""EVENT_RETENTION_DAYS=10**12 as a TTL in seconds: Redis's EXPIRE refuses it ("invalid
expire time"), so a script must refuse it before its first write."""
HOSTILE = ("abc", "", "-1", "1e999", "nan", "{", "0 1", "\xff", TOO_LONG)
Captured = dict[str, list[tuple[list[Any], list[Any]]]]


def capture(ledger: Ledger, attempts: Attempts, gate: Gate | None = None) -> Captured:
    """Keep the positional keys and arguments of each script's real calls, as Redis got them."""
    calls: Captured = {}
    scripts = [
        ledger.record_script,
        ledger.reject_script,
        *attempts.scripts.values(),
        *(gate.scripts.values() if gate else ()),
    ]
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


def drive(ledger: Ledger, attempts: Attempts, gate: Gate, rng: random.Random) -> None:
    """One of each transition, with real arguments."""
    event = samples.payment_events(rng)[2]
    record(ledger, event)
    found = samples.payment_events(rng)[2]  # found through the Events API by reconcile
    c = classify(found, ledger.settings.policy)
    ledger.record_delivery(Delivery(found, b"{}", c, "", API_SOURCE, new_request_id()))
    pk = event["data"]["object"]["id"]
    ledger.record_rejection("signature_mismatch", {"status": 400})
    assert gate.admit(pk, "job-1").verdict == "go"
    start = attempts.start(pk, "job-1", replay_safe=False)
    attempts.mark_calling(pk, start.token)
    gate.report(pk, start.token, Health("down", sent=False), "refused")
    attempts.finish(pk, start.token, "interrupted", "reset", 12.0)
    gate.pause("test", "hostile")
    gate.resume("test")
    gate.release()
    attempts.recover(pk)
    attempts.record_decision(pk, "fulfilled", ("interrupted",), "test")
    attempts.purge()


def dump(redis: Redis) -> dict[bytes, bytes | None]:
    """Every key's serialised value (None: gone between the scan and its DUMP), in one round
    trip: a script's hostile variants take a snapshot each."""
    names = sorted(redis.scan_iter(count=1000))
    pipe = redis.pipeline(transaction=False)
    for key in names:
        pipe.dump(key)
    return dict(zip(names, pipe.execute(), strict=True))


def restore(redis: Redis, snapshot: dict[bytes, bytes | None]) -> None:
    """The database as ``snapshot``, in one transaction (one append-only write, one fsync
    under the shipped ``appendfsync always``, instead of one per key)."""
    pipe = redis.pipeline(transaction=True)
    pipe.flushdb()
    for key, value in snapshot.items():
        if value is not None:
            pipe.restore(key, 0, value)
    pipe.execute()


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
    "gate",
    "breaker",
    "release",
    "pause",
    "resume",
)


def driven(name: str, url: str, rng: random.Random) -> tuple[Script, list[Any], list[Any]]:
    """Script ``name`` and the keys and arguments of its first real call, after one of each
    transition."""
    ledger = ledger_for(url, PAYMENT_RETENTION_DAYS=31)
    attempts = Attempts(ledger.redis, ledger.settings)
    gate = Gate(ledger.redis, ledger.settings)
    calls = capture(ledger, attempts, gate)
    drive(ledger, attempts, gate, rng)
    assert name in calls, f"{name} was not driven"
    keys, args = calls[name][0]
    scripts = [ledger.record_script, ledger.reject_script, *attempts.scripts.values()]
    by_name = {s.name: s for s in (*scripts, *gate.scripts.values())}
    return by_name[name.removesuffix("_api")], keys, args


def new_request(script: Script, keys: list[Any], tag: str) -> None:
    """A new request each time, not a retry (whose first answer would be replayed)."""
    if "request" in script.key_names:
        keys[script.key_names.index("request")] = f"wl:req:hostile-{tag}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_failing_script_writes_nothing(name: str, redis: Redis, redis_server, rng) -> None:
    script, keys, args = driven(name, redis_server.url, rng)
    state = dump(redis)
    errors = 0
    for n, bad in enumerate(variants(args)):
        new_request(script, keys, str(n))
        try:
            script.run(keys, bad)
        except ResponseError:
            errors += 1
            assert dump(redis) == state, f"{name} wrote before failing on {bad!r}"
        else:  # it wrote, as it may: back to the state before the call
            restore(redis, state)
    assert errors, f"no hostile argument made {name} fail: the check proves nothing"


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_refusal_names_the_argument_and_its_value(
    name: str, redis: Redis, redis_server, rng
) -> None:
    """Each argument cut off or replaced by a hostile value: a refusal names the script and
    that argument (the captured enqueue, past the named ones), and shows a printable value."""
    script, keys, args = driven(name, redis_server.url, rng)
    state = dump(redis)
    refused = 0
    for i in range(len(args)):
        named = script.arg_names[i] if i < len(script.arg_names) else "captured enqueue"
        for bad in (None, *HOSTILE):
            new_request(script, keys, f"{i}-{bad!r}")
            try:
                script.run(keys, args[:i] if bad is None else [*args[:i], bad, *args[i + 1 :]])
            except ResponseError as exc:
                refused += 1
                message = str(exc)
                assert message.startswith(f"{script.name}: ") and named in message, message
                if bad is not None and bad.isascii() and bad.isprintable():
                    assert f"'{bad}'" in message, message
            else:
                restore(redis, state)
    assert refused, f"no argument of {name} was refused: the check proves nothing"


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


def test_a_ttl_redis_would_refuse_is_refused_before_the_first_write(
    redis: Redis, redis_server, rng
) -> None:
    """A new event (the path that writes the event hash, then sets its TTL) with a TTL
    EXPIRE would refuse: refused by the script's checks, nothing written."""
    ledger = ledger_for(redis_server.url)
    calls = capture(ledger, Attempts(ledger.redis, ledger.settings))
    record(ledger, samples.payment_events(rng)[2])
    keys_, args = calls["record_delivery"][0]
    redis.flushdb()  # the event is new again
    at = ledger.record_script.arg_names.index("event_ttl")
    with pytest.raises(ResponseError) as refused:
        ledger.record_script.run(keys_, [*args[:at], TOO_LONG, *args[at + 1 :]])
    assert dump(redis) == {}, "nothing written before the refusal"
    assert "record_delivery: event_ttl" in str(refused.value)


def test_the_longest_durations_the_settings_allow_are_ones_redis_accepts(
    redis: Redis, redis_server, rng
) -> None:
    """Every duration at its ceiling: a paid delivery is recorded and enqueued, its event
    lives for the whole retention, and a lease and a retry are taken with them."""
    most_s, most_days = str(limits.MAX_DURATION_SECONDS), str(limits.MAX_DURATION_DAYS)
    ledger = ledger_for(
        redis_server.url,
        EVENT_RETENTION_DAYS=most_days,
        QUEUED_GRACE_SECONDS=most_s,
        FULFILMENT_TIMEOUT=str(limits.MAX_DURATION_SECONDS - limits.LEASE_MARGIN_SECONDS),
        LEASE_SECONDS=most_s,
        RETRY_BASE_SECONDS=most_s,
        RETRY_MAX_SECONDS=most_s,
    )
    attempts = Attempts(ledger.redis, ledger.settings)
    event = samples.payment_events(rng)[2]
    assert record(ledger, event).enqueued
    assert redis.ttl(keys.event(event["id"])) > (limits.MAX_DURATION_DAYS - 1) * 86400
    pk = event["data"]["object"]["id"]
    start = attempts.start(pk, "job-1", replay_safe=True)
    assert start.verdict == "go"
    attempts.finish(pk, start.token, "retry", "downstream 503", 12.0)
    assert redis.hget(keys.payment(pk), "state") == b"retrying"
    with pytest.raises(SettingsError, match="EVENT_RETENTION_DAYS"):
        ledger_for(redis_server.url, EVENT_RETENTION_DAYS=str(limits.MAX_DURATION_DAYS + 1))
