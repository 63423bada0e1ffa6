"""A long-running process that starts its work again when the work's process ends.

The fulfilment worker's watchdog ends its own process when a call will not stop
(workers/deadline.py), by design. Under ``honcho start`` one process ending stops every
other, the web process included, and Stripe's deliveries are refused until a person starts
the stack again. So ``fulfilment-worker`` and ``webhook-ledger sweep --loop`` run their work
in a child process and this one, the process a platform or honcho started, forks another
when it ends unasked (a pause first, doubling up to RESTART_MAX_SECONDS while it keeps
ending soon after its start).

Stopping: SIGTERM or SIGINT to this process is passed to the child once, which stops as it
would on its own (RQ: finish the current job). The child runs in a process group of its
own, so a signal to this process's group (honcho's SIGTERM) reaches it once, not twice (a
second one is RQ's cold shutdown). Between two children a stop signal ends this process at
once. If this process is killed outright (SIGKILL, honcho's after 5 s), its child follows:
it notices the pipe from its parent close and kills itself the same way.
"""

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("workers.supervise")

RESTART_SECONDS = 1.0
"""Pause before the first restart."""
RESTART_MAX_SECONDS = 30.0
"""Longest pause between restarts of a child that keeps ending soon after its start."""
STEADY_SECONDS = 60.0
"""A child that ran this long is followed after the first pause again."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Forwarder:
    """This process's stop signals, each passed on to the running child once."""

    def __init__(self) -> None:
        self.child: int | None = None
        self.requested: int | None = None
        """The stop signal received, if any."""

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested = signum
        self.forward()

    def attach(self, child: int | None) -> None:
        """Pass signals on to ``child`` from now on (one that came during the fork too)."""
        self.child = child
        if child is not None and self.requested is not None:
            self.forward()

    def forward(self) -> None:
        if self.child is not None and self.requested is not None:
            try:
                os.kill(self.child, self.requested)
            except ProcessLookupError:
                pass  # ended meanwhile: the wait returns


def supervise(name: str, work: Callable[[], int]) -> int:
    """Run ``work()`` in a child process until it returns 0 or this process is asked to stop;
    start it again after any other end. The last child's exit code (128 + the signal that
    ended it)."""
    forwarder = Forwarder()
    pause = RESTART_SECONDS
    while True:
        for signum in STOP_SIGNALS:
            signal.signal(signum, forwarder)
        started = time.monotonic()
        code = run_child(work, forwarder)
        if code == 0 or forwarder.requested is not None:
            return code
        for signum in STOP_SIGNALS:  # from here until the next child, a stop signal ends it
            signal.signal(signum, signal.SIG_DFL)
        if forwarder.requested is not None:
            return code
        if time.monotonic() - started >= STEADY_SECONDS:
            pause = RESTART_SECONDS
        log.warning("%s: its process ended with exit code %s; starting another in %g s",
                    name, code, pause)  # fmt: skip
        time.sleep(pause)
        pause = min(2 * pause, RESTART_MAX_SECONDS)


def run_child(work: Callable[[], int], forwarder: Forwarder) -> int:
    """Fork, run ``work()`` in the child, wait for it; its exit code."""
    parent_alive, parent_gone = os.pipe()  # the child's read end sees EOF once we are gone
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(parent_gone)
        os._exit(child(work, parent_alive))
    os.close(parent_alive)
    try:
        os.setpgid(pid, pid)  # also in the child: whichever runs first
    except OSError:
        pass  # it has already ended, or made its group
    forwarder.attach(pid)
    try:
        _, status = os.waitpid(pid, 0)
    finally:
        forwarder.attach(None)
        os.close(parent_gone)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def child(work: Callable[[], int], parent_alive: int) -> int:
    """The child's life: its own process group and default signals, then ``work()``."""
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Thread(target=follow_parent, args=(parent_alive,), daemon=True).start()
        return work()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except BaseException:
        log.exception("the work ended with an error")
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def follow_parent(parent_alive: int) -> None:
    """Block until the parent is gone (the pipe's write end closed), then die as a SIGKILL
    of the parent's process group would have killed this process."""
    while os.read(parent_alive, 1):
        pass
    os.kill(os.getpid(), signal.SIGKILL)
