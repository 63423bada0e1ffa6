"""A hard wall-clock deadline for one downstream call, whatever the action does inside.

Per-socket timeouts bound each read, not the call: a downstream that trickles its answer
could outlive the attempt's lease, and a second attempt would call it again meanwhile. Two
layers enforce ``FULFILMENT_TIMEOUT``:

- In the worker's main thread (RQ's SimpleWorker runs jobs there) a SIGALRM timer interrupts
  the call between Python bytecodes; RQ's own job-timeout alarm, always longer, is restored
  after. Elsewhere (a thread of a worker with FULFILMENT_CONCURRENCY > 1) the call runs in
  a helper thread, and at the deadline its caller is told (an action's ``abort`` cuts its
  connection) and waits for it to stop. Either way the call ends as ambiguous, exactly as
  a timed-out read, and nothing is recorded while it may still apply.
- A signal handler runs only when the interpreter gets control back: a call blocked inside C
  code (SQLite's busy wait, a C extension, a blocking syscall retried on EINTR) does not see
  it. So a watchdog that needs no interpreter lock (faulthandler's C thread) ends the whole
  process with ``_exit`` ``kill_after`` seconds past the deadline if the call has not
  stopped by then; it prints every thread's traceback first, under "Timeout". A helper
  thread still in its call keeps the watchdog armed: the process ends with it. One watchdog serves
  every call a process has in flight (``Watchdog``): it ends the process at the first
  kill time among them.
"""

import faulthandler
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


# A BaseException, not an Exception: libraries that catch Exception must not swallow it.
class DeadlineExceeded(BaseException):
    """The call ran past FULFILMENT_TIMEOUT; it may or may not have been applied."""


class Watchdog:
    """The process's one watchdog over every call it has in flight: armed for the call
    whose kill time comes first, moved on when that call stops, off when none is left.
    Its thread (faulthandler's, one per process) needs no interpreter lock, so a call
    stuck in C code cannot hold it off; when it fires it ends the whole process, every
    call in flight with it (each then a worker that died during its call: the sweeper
    re-runs or marks it ``interrupted`` once its lease has expired)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kill_at: dict[int, float] = {}  # call -> time.monotonic() to end the process
        self.serial = 0

    def arm(self, seconds: float) -> int:
        """Watch one more call that must stop within ``seconds``; its handle."""
        with self.lock:
            self.serial += 1
            self.kill_at[self.serial] = time.monotonic() + seconds
            self._set()
            return self.serial

    def disarm(self, call: int) -> None:
        """The call ``call`` stopped."""
        with self.lock:
            self.kill_at.pop(call, None)
            self._set()

    def _set(self) -> None:
        if not self.kill_at:
            faulthandler.cancel_dump_traceback_later()
            return
        left = max(min(self.kill_at.values()) - time.monotonic(), 0.001)
        faulthandler.dump_traceback_later(left, exit=True, file=sys.__stderr__ or sys.stderr)


WATCHDOG = Watchdog()


def call_within(
    seconds: float,
    fn: Callable[[], T],
    kill_after: float,
    abort: Callable[[], None] | None = None,
) -> T:
    """``fn()``, or DeadlineExceeded once ``seconds`` have passed; the process ends
    ``kill_after`` seconds later if the call is still running then. ``abort`` (the action's)
    is called at the deadline when the call runs in a helper thread, which no signal
    reaches: it may end a wait in C code (a socket the call reads) so the call stops there
    instead of with the process."""
    watched = WATCHDOG.arm(seconds + kill_after)
    if threading.current_thread() is threading.main_thread():
        try:
            return _with_alarm(seconds, fn)
        finally:  # fn returned or unwound: the call has stopped
            WATCHDOG.disarm(watched)
    return _in_thread(seconds, fn, watched, abort)


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


class Helper:
    """The one thread a calling thread's downstream calls run in (a slot's, across fresh
    workers: :func:`calling_thread`), kept for the life of the process: an action's
    per-thread state (SQLite's connection, which refuses other threads) is built and used in
    the same thread every time. A call past its deadline is waited for (or ends the
    process), so the helper is free whenever its caller asks."""

    def __init__(self) -> None:
        self.calls: queue.SimpleQueue[Call[Any]] = queue.SimpleQueue()
        threading.Thread(target=self.serve, daemon=True, name="downstream-call").start()

    def serve(self) -> None:
        while True:
            self.calls.get().run()


class Call(Generic[T]):
    def __init__(self, fn: Callable[[], T], watched: int) -> None:
        self.fn = fn
        self.watched = watched
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:  # handed to the caller
            self.error = exc
        # Here, not in the caller: RQ's TimerDeathPenalty may raise in the caller anywhere
        # (as its wait returns, say), and the watchdog must stay armed exactly while the
        # call runs, however its caller leaves.
        WATCHDOG.disarm(self.watched)
        self.done.set()


def calling_thread() -> tuple[int, str]:
    """The process and thread name that key both a thread's action (workers.jobs.context)
    and its helper. A worker's pool names its threads by slot (``fulfil_0``, ``fulfil_1``,
    ...: workers/inflight.py), so a fresh worker's pool after a Redis error
    (workers/worker.py) is given the slots' actions, whose per-thread state lives in their
    helpers: one of each per slot for the life of the process. Not the thread's id: a new
    thread does not always take the id of one that ended, and each fresh worker left an
    action, its Redis client and its helper thread behind."""
    return os.getpid(), threading.current_thread().name


_helpers: dict[tuple[int, str], Helper] = {}


def _in_thread(
    seconds: float, fn: Callable[[], T], watched: int, abort: Callable[[], None] | None
) -> T:
    caller = calling_thread()
    helper = _helpers.get(caller)
    if helper is None:
        helper = _helpers[caller] = Helper()
    call = Call(fn, watched)
    helper.calls.put(call)
    if not call.done.wait(seconds):
        # Still running: the watchdog stays armed and ends the process if it does not stop.
        # Until then this thread waits too, so nothing is recorded that a new attempt could
        # act on while the call may still apply.
        if abort is not None:
            abort()
        call.done.wait()
        raise DeadlineExceeded(f"the call took longer than {seconds:g} s")
    if call.error is not None:
        raise call.error
    return call.result  # type: ignore[return-value]
