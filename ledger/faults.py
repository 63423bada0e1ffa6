"""Named fault points, off unless ``FAULTPOINT`` names them (tests and the soak use them).

``FAULTPOINT=after_action`` kills the process (SIGKILL) when it reaches that point;
``FAULTPOINT=after_lease:sleep:40`` sleeps 40 s there instead. Several points may be
given, comma-separated. ``FAULT_PROBABILITY`` (default 1) fires each one at random.
"""

import os
import random
import signal
import sys
import time

POINTS = (
    "receiver_after_verify",
    "receiver_after_record",
    "after_lease",
    "before_action",
    "after_action",
    "during_record",
    "sweeper_mid_scan",
)


def _armed() -> dict[str, list[str]]:
    spec = os.environ.get("FAULTPOINT", "")
    armed: dict[str, list[str]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, *action = item.split(":")
        if name not in POINTS:
            raise ValueError(f"unknown fault point {name!r}; known: {', '.join(POINTS)}")
        armed[name] = action or ["kill"]
    return armed


ARMED = _armed()


def fires(name: str) -> bool:
    """Whether the fault point ``name`` is armed and, by FAULT_PROBABILITY, fires now."""
    return name in ARMED and random.random() < float(os.environ.get("FAULT_PROBABILITY", "1"))


def act(name: str) -> None:
    """Do what the armed point says: sleep, or SIGKILL this process."""
    action = ARMED[name]
    if action[0] == "sleep":
        # Tests wait for this line (progress), never for a guessed amount of time.
        print(f"fault point {name}: sleeping {action[1]} s", file=sys.stderr, flush=True)
        time.sleep(float(action[1]))
        return
    os.kill(os.getpid(), signal.SIGKILL)


def fault(name: str) -> None:
    """Fire the fault point ``name`` if it is armed; a no-op otherwise."""
    if fires(name):
        act(name)
