"""The fulfilment protocol, explored by a machine instead of imagined by a person.

Hypothesis drives the real Lua scripts on a real Redis (the shipped config: append-only,
fsync always) through their Python API: deliveries of any event of a few payments (copies,
any order, the same id with other bytes), workers that start, fence, call a downstream,
finish with any outcome (the downstream down included, which the shared circuit breaker
counts), die, or stall and come back with an old token (a success among them, after a
person's retry and the gate's deferral), time moving past leases and cool-downs, the
sweeper, a person's decisions, pausing and resuming fulfilment, refunds and disputes (and
the reversals they make due, REVERSAL_ACTION on or off, and the settlements of a built-in
action after a call with no answer), and Redis restarted from its append-only file.
After every step the invariants of docs/LEDGER.md ("The protocol's invariants") are
checked; at the end of every program, with faults stopped and time moving, every paid
payment must reach an end.

``PROTOCOL_PROGRAMS`` / ``PROTOCOL_STEPS`` set the budget (CI: 300 programs of up to 50
steps, 45-80 s); docs/RELIABILITY.md records the long run. With ``PROTOCOL_REPORT`` (a
path) the run writes what it did there: programs, steps, Redis restarts, breaker openings and
probes, payments deferred by a pause or the open breaker, attempts refunded, attempts
finished by outcome, a basil renewal's ties (to one record, tied late, after a call), seconds.
``PROTOCOL_SEED`` picks other programs than CI's.

The test that runs it is tests/integration/test_protocol.py; the tests pinned on the
same machine, driven by hand, are tests/integration/test_protocol_*.py. The machine, read
from the bottom up:

- ``constants``: the budget, the timings and the names the rules and invariants share;
  ``worker``: what the model's worker holds; ``events``: the pool of events a program
  delivers (``event_pool``).
- ``state``: the state of a program, declared, and reads of the ledger; ``model``: the
  model's own account of what happened, kept beside the ledger's.
- The rules, by actor: ``deliveries``, ``thin_events``, ``takings`` and ``given_back``
  (Stripe); ``worker_jobs``, ``worker_calls`` and ``whole_jobs`` (the workers and their
  downstream); ``persons``; ``time_and_redis``.
- The invariants, checked after every step: ``effect_invariants``, ``reversal_invariants``,
  ``ledger_invariants``.
- ``machine``: ``Protocol``, all of them composed, with the setup and the end of a program.
- ``by_hand``: a machine driven by hand, for the pinned tests; ``fixtures``: the Redis
  server they and the explorer share (``protocol_redis``).
"""
