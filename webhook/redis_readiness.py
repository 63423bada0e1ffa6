"""redis-py's readiness check without gevent's hub, in the gevent web worker.

Before each command redis-py's pool asks whether the pooled connection holds a reply nobody
read (ledger/connection.py relies on it): ``select.poll()`` with a zero timeout, in
``redis._parsers.hiredis``. Under gevent's patched ``select`` that poll never waits, yet
goes through the hub (a timer, a switch, an exception thrown back into the greenlet):
37-91 µs of a web worker's CPU a delivery at peak in four side-by-side runs
(docs/PERFORMANCE.md, "redis-py's readiness check"). Here that module alone gets a poll
whose zero-timeout calls are the operating system's; a call with a timeout (none in the web
process) still waits through gevent's, so nothing blocks the worker. Every other module
keeps gevent's ``select``.
"""

import select
from types import SimpleNamespace
from typing import Any


class ZeroWaitPoll:
    """``select.poll()`` as redis-py's parser uses it (``register``, then one ``poll``):
    the OS's poll for a zero timeout, gevent's for any other."""

    def __init__(self, real: Any, cooperative: Any) -> None:
        self.real, self.cooperative = real(), cooperative
        self.registered: list[tuple[Any, int]] = []

    def register(self, fd: Any, eventmask: int) -> None:
        self.real.register(fd, eventmask)
        self.registered.append((fd, eventmask))

    def poll(self, timeout: float | None = None) -> list[tuple[int, int]]:
        if timeout == 0:
            return self.real.poll(0)
        waiting = self.cooperative()
        for fd, eventmask in self.registered:
            waiting.register(fd, eventmask)
        return waiting.poll(timeout)


def poll_without_the_hub() -> bool:
    """Give redis-py's hiredis parser a ZeroWaitPoll. False, and nothing changed, unless
    gevent has patched ``select`` and that module still reads ``select.poll`` (another
    redis-py may not: its check then costs what it did)."""
    from gevent.monkey import get_original, is_module_patched

    try:
        from redis._parsers import hiredis as parser
    except ImportError:
        return False
    if not is_module_patched("select") or getattr(parser, "select", None) is not select:
        return False
    real, cooperative = get_original("select", "poll"), select.poll
    flags = {name: getattr(select, name) for name in dir(select) if name.startswith("POLL")}
    namespace = SimpleNamespace(poll=lambda: ZeroWaitPoll(real, cooperative), **flags)
    parser.select = namespace  # type: ignore[assignment]  # the module reads only these
    return True
