"""A hard wall-clock deadline for one downstream call, whatever the action does inside.

Per-socket timeouts bound each read, not the call: a downstream that trickles its answer
could outlive the attempt's lease, and a second attempt would call it again meanwhile. Two
layers enforce ``FULFILMENT_TIMEOUT``:

- In the worker's main thread (RQ's SimpleWorker runs jobs there) a SIGALRM timer interrupts
  the call between Python bytecodes; RQ's own job-timeout alarm, always longer, is restored
  after. Elsewhere (a thread) the call runs in a helper thread that is abandoned at the
  deadline. Either way the call ends as ambiguous, exactly as a timed-out read.
- A signal handler runs only when the interpreter gets control back: a call blocked inside C
  code (SQLite's busy wait, a C extension, a blocking syscall retried on EINTR) does not see
  it. So a watchdog that needs no interpreter lock (faulthandler's C thread) ends the whole
  process with ``_exit`` ``kill_after`` seconds past the deadline if the call has not
  stopped by then; it prints every thread's traceback first, under "Timeout". An abandoned
  helper thread keeps the watchdog armed: the process ends with it.
"""

import faulthandler
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


# A BaseException, not an Exception: libraries that catch Exception must not swallow it.
class DeadlineExceeded(BaseException):
    """The call ran past FULFILMENT_TIMEOUT; it may or may not have been applied."""


def arm_watchdog(seconds: float) -> None:
    """End this process (``_exit(1)``, after a traceback dump on stderr) unless
    :func:`disarm_watchdog` is called within ``seconds``. One per process; arming again
    replaces it. Its thread needs no interpreter lock, so a call stuck in C code cannot
    hold it off."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__ or sys.stderr)


def disarm_watchdog() -> None:
    faulthandler.cancel_dump_traceback_later()


def call_within(seconds: float, fn: Callable[[], T], kill_after: float) -> T:
    """``fn()``, or DeadlineExceeded once ``seconds`` have passed; the process ends
    ``kill_after`` seconds later if the call is still running then."""
    arm_watchdog(seconds + kill_after)
    if threading.current_thread() is threading.main_thread():
        try:
            return _with_alarm(seconds, fn)
        finally:  # fn returned or unwound: the call has stopped
            disarm_watchdog()
    return _in_thread(seconds, fn)


def _with_alarm(seconds: float, fn: Callable[[], T]) -> T:
    def expire(signum: int, frame: object) -> None:
        raise DeadlineExceeded(f"the call took longer than {seconds:g} s")

    began = time.monotonic()
    previous_handler = signal.signal(signal.SIGALRM, expire)
    previous_delay, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay:  # RQ's job timeout: put back what is left of it
            left = previous_delay - (time.monotonic() - began)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))


def _in_thread(seconds: float, fn: Callable[[], T]) -> T:
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # handed to the caller below
            error.append(exc)

    helper = threading.Thread(target=run, daemon=True, name="downstream-call")
    helper.start()
    helper.join(seconds)
    if helper.is_alive():
        # Still running: the watchdog stays armed and ends the process if it does not stop.
        # Until then this thread waits too, so nothing is recorded that a new attempt could
        # act on while the call may still apply.
        helper.join()
        disarm_watchdog()
        raise DeadlineExceeded(f"the call took longer than {seconds:g} s")
    disarm_watchdog()
    if error:
        raise error[0]
    return result[0]
