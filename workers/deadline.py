"""A hard wall-clock deadline for one downstream call, whatever the action does inside.

Per-socket timeouts bound each read, not the call: a downstream that trickles its answer
could outlive the attempt's lease, and a second attempt would call it again meanwhile. In
the worker's main thread (RQ's SimpleWorker runs jobs there) the deadline is a SIGALRM
timer that interrupts the call; RQ's own job-timeout alarm, always longer, is restored
after. Elsewhere (a thread) the call runs in a helper thread that is abandoned at the
deadline: the ledger then treats the call as ambiguous, exactly as for a timed-out read.
"""

import signal
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


# A BaseException, not an Exception: libraries that catch Exception must not swallow it.
class DeadlineExceeded(BaseException):
    """The call ran past FULFILMENT_TIMEOUT; it may or may not have been applied."""


def call_within(seconds: float, fn: Callable[[], T]) -> T:
    """``fn()``, or DeadlineExceeded once ``seconds`` have passed."""
    if threading.current_thread() is threading.main_thread():
        return _with_alarm(seconds, fn)
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
        raise DeadlineExceeded(f"the call took longer than {seconds:g} s")
    if error:
        raise error[0]
    return result[0]
