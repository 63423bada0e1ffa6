"""honcho's manager, stopping the stack in order: the processes that use the ledger first
(web, workers, sweeper, ``stripe listen``), its Redis nodes and Sentinels once those are gone.
honcho sends SIGTERM to every process at once, so Redis stopped while a worker was still
finishing its job: the worker logged "could not connect to Redis" and its attempt's end was
never recorded (the payment then waited out its lease)."""

import threading
import time
from datetime import datetime

from honcho.manager import Manager
from honcho.printer import Message

DATA_NODES = ("redis", "sentinel")
"""Name prefixes of the Procfile's redis and Procfile.ha's redisN and sentinelN."""
DRAIN_SECONDS = 4.0
"""How long the others get before the data nodes are stopped all the same: under honcho's
5 s, after which every process left is sent SIGKILL."""


def say(manager: Manager, text: str) -> None:
    """A line in the manager's own output, between the processes' lines: through its queue,
    so any thread may say one."""
    now = datetime.now()
    manager.events.put(Message(type="line", data=text + "\n", time=now, name="system", colour=None))


class OrderedStop(Manager):
    def _killall(self, force: bool = False) -> None:
        if force:
            super()._killall(force=True)
            return
        users = [name for name in self._processes if not name.startswith(DATA_NODES)]
        self._stop(users)
        threading.Thread(target=self._stop_data_nodes_after, args=(users,), daemon=True).start()

    def _running(self, names: list[str]) -> list[str]:
        return [name for name in names if "returncode" not in self._processes[name]]

    def _stop(self, names: list[str]) -> None:
        for name in self._running(names):
            pid = self._processes[name]["pid"]
            say(self, f"sending SIGTERM to {name} (pid {pid})")  # maybe from the drain thread
            self._procmgr.terminate(pid)

    def _stop_data_nodes_after(self, users: list[str]) -> None:
        until = time.monotonic() + DRAIN_SECONDS
        while self._running(users) and time.monotonic() < until:
            time.sleep(0.05)
        self._stop([name for name in self._processes if name.startswith(DATA_NODES)])
