"""Where record_delivery's time inside Redis goes: the function cut short at each step.

The same deliveries (the bench's events, in Stripe's order, arguments built by the ledger
and captured unsent) are sent with FCALL to the shipped redis-server (``appendfsync
always``) once per variant: the function as shipped, and copies that return at each step
of its main block. Redis's own ``commandstats`` gives the function's time a call; each
step's cost is its difference from the one before (the last step of a cut copy writes
less than the shipped function). Rounds alternate; the minimum of each variant's rounds
is the least disturbed by other work on the machine. Not part of ``bench.run_all``.

    .venv/bin/python -m bench.record_cost [--events 3000] [--rounds 5]
"""

import argparse
import statistics
import sys
from typing import Any

from bench.common import RedisServer, Stack, Workdir, log
from bench.events import EventFactory
from bench.profile import _script_call
from bench.recording import delivery
from ledger import settings
from ledger.deliveries import Ledger
from ledger.scripts import library

STEPS = (
    ("arguments named, local functions made", "local replay = replayed()"),
    ("a retried request looked up", "local event_ttl, grace_ms, purchase, taken = checked()"),
    ("arguments checked (captured RQ commands too)", "local now = now_ms()"),
    ("the event's record read", "local d = classified(first, now)"),
    ("classified, payment found, hold checked", "local n = write_event(d, event_ttl)"),
    ("the event and the counts written", "local enqueued = 0"),
    ("the payment joined (paid: marked, queued, RQ job)", "if not d.from_api then bump_series"),
    ("the per-minute series", "return answer{deliveries = n,"),
)
WHOLE = "the answer kept for a retry (the whole function)"


def variants(text: str) -> dict[str, str]:
    """Each step's name -> the library returning right after it."""
    out = {}
    for name, next_line in STEPS:
        assert text.count(next_line) == 1, next_line
        out[name] = text.replace(next_line, "do return 0 end\n" + next_line)
    out[WHOLE] = text
    return out


def run(n_events: int, rounds: int) -> dict[str, Any]:
    wd = Workdir.make("record-cost")
    try:
        with Stack() as st:
            redis = st.start(RedisServer(wd.sub("redis"))).client()
            ledger = Ledger(redis, settings.load({}, STRIPE_MODE="test"))
            bodies = EventFactory(seed=1).events(n_events)
            calls = [_script_call(ledger, delivery(ledger, b)) for b in bodies]
            text, function = library("record_delivery")
            per_call: dict[str, list[float]] = {name: [] for name in variants(text)}
            commands: dict[str, float] = {}
            for i in range(rounds):
                log(f"round {i + 1}/{rounds}")
                for name, lib in variants(text).items():
                    redis.flushdb()
                    redis.function_flush()
                    redis.function_load(lib)
                    redis.config_resetstat()
                    for keys, args in calls:
                        redis.fcall(function, len(keys), *keys, *args)
                    stats = redis.info("commandstats")
                    fcall = stats.pop("cmdstat_fcall")
                    per_call[name].append(fcall["usec_per_call"])
                    commands[name] = sum(s["calls"] for s in stats.values()) / fcall["calls"]
    finally:
        wd.remove()
    return {"per_call_us": per_call, "commands_per_call": commands, "events": n_events}


def show(result: dict[str, Any]) -> None:
    before = 0.0
    print(f"{'returns after':52s} {'µs a call':>9s} {'step':>7s} {'median':>7s} {'commands':>8s}")
    for name, runs in result["per_call_us"].items():
        least = min(runs)
        step, before = least - before, least
        middle, commands = statistics.median(runs), result["commands_per_call"][name]
        print(f"{name:52s} {least:9.1f} {step:+7.1f} {middle:7.1f} {commands:8.1f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    show(run(args.events, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
