"""The worker ``webhook-ledger prove-action`` starts: the service's own worker and job
(workers/worker.py, workers/jobs.py) with the configured action wrapped, so a fault can be
placed where no fault point of ledger/faults.py reaches, inside the action's call.

The wrapper appends ``<payment key> <pid>`` to ``PROVE_CALLS`` before each call (the calls
the prover counts) and ``<payment key> <pid> <function calls made>`` to ``PROVE_COUNTS``
after it (how deep a call goes, for the prover to choose ``k``; a call started and not
ended is still running, unless its process is gone); REVERSAL_ACTION's calls go to
``PROVE_REVERSAL_CALLS`` and ``PROVE_REVERSAL_COUNTS``. The faults strike the action
``PROVE_LEG`` names (``fulfil``, the default, or ``reverse``), each for its first call in
this process only:

- ``PROVE_STOP_AT=k``: at the k-th Python or C function call made inside the action (a
  profile hook counts them), the process stops itself: ``SIGKILL`` with
  ``PROVE_STOP=kill``, ``SIGSTOP`` with ``PROVE_STOP=pause`` (the prover sends SIGCONT).
  Counting calls rather than time puts the fault at the same place on a busy machine.
- ``PROVE_SLOW=1``: the call applies, then its answer is held past FULFILMENT_TIMEOUT, so
  the worker's deadline ends it (the downstream timed out after applying).
- ``PROVE_RESEND=1``: the call is made a second time with the same purchase, the same
  idempotency key, once the first has returned.
"""

import os
import signal
import sys
import time
from types import FrameType
from typing import Any

from ledger import settings as settings_module
from ledger.connection import connect
from ledger.purchase import Purchase
from ledger.settings import Settings
from workers import jobs
from workers.actions import Action, Receipt, build_action, build_reversal_action
from workers.worker import work_once

PROFILED = ("call", "c_call")


class Faulty:
    """The configured action, its first call in this process faulted as the env says. Its
    other parts (a built-in action's ``settle`` and ``abort``) are the action's own, and
    so is its downstream (``wrapped``, workers.actions.downstream_of): the worker takes
    the paths it would take with the action itself."""

    def __init__(self, action: Action, env: dict[str, str], timeout: float, leg: str) -> None:
        self.wrapped, self.timeout = action, timeout
        self.replay_safe = action.replay_safe
        faulted = env.get("PROVE_LEG", "fulfil") == leg
        self.stop_at = int(env.get("PROVE_STOP_AT") or 0) if faulted else 0
        self.stop = env.get("PROVE_STOP", "kill")
        self.slow = faulted and env.get("PROVE_SLOW") == "1"
        self.resend = faulted and env.get("PROVE_RESEND") == "1"
        files = ("PROVE_CALLS", "PROVE_COUNTS")
        if leg == "reverse":
            files = ("PROVE_REVERSAL_CALLS", "PROVE_REVERSAL_COUNTS")
        self.calls_file, self.counts_file = env[files[0]], env[files[1]]
        self.first = True

    def __call__(self, purchase: Purchase) -> Receipt:
        first, self.first = self.first, False
        receipt = self._counted(purchase, self.stop_at if first else 0)
        if first and self.resend:
            receipt = self._counted(purchase, 0)
        if first and self.slow:
            time.sleep(self.timeout + 1)  # the worker's deadline (SIGALRM) ends this sleep
        return receipt

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def _counted(self, purchase: Purchase, stop_at: int) -> Receipt:
        append(self.calls_file, f"{purchase.payment_key} {os.getpid()}")
        seen = 0

        def profile(frame: FrameType, event: str, arg: Any) -> None:
            nonlocal seen
            if event in PROFILED:
                seen += 1
                if seen == stop_at:
                    os.kill(os.getpid(), signal.SIGKILL if self.stop == "kill" else signal.SIGSTOP)

        sys.setprofile(profile)
        try:
            return self.wrapped(purchase)
        finally:
            sys.setprofile(None)
            append(self.counts_file, f"{purchase.payment_key} {os.getpid()} {seen}")


def append(path: str, line: str) -> None:
    """One line, written whole (O_APPEND) before the call goes on: a kill right after it
    still leaves it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def faulty_builder(env: dict[str, str]) -> Any:
    def build(s: Settings) -> Action:
        return Faulty(build_action(s), env, s.FULFILMENT_TIMEOUT, "fulfil")

    return build


def faulty_reversal_builder(env: dict[str, str]) -> Any:
    def build(s: Settings) -> Action | None:
        action = build_reversal_action(s)
        return None if action is None else Faulty(action, env, s.FULFILMENT_TIMEOUT, "reverse")

    return build


def main() -> None:
    s = settings_module.load_or_exit()
    if not all(hasattr(jobs, f) for f in ("build_action", "build_reversal_action")):
        # a fault placed nowhere would prove nothing
        sys.exit("prove_worker: workers.jobs builds its actions another way; wrap those")
    jobs.build_action = faulty_builder(dict(os.environ))  # what workers.jobs.context builds
    jobs.build_reversal_action = faulty_reversal_builder(dict(os.environ))
    redis = connect(s)
    while not work_once(redis, (s.QUEUE_NAME,), burst=False):
        time.sleep(0.2)


if __name__ == "__main__":
    main()
