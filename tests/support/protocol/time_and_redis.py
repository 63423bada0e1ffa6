"""Rules of time and of Redis itself: time passing, Redis's clock stepping forward, the
sweeper's pass, and Redis restarted from its append-only file."""

import hypothesis.strategies as st
from hypothesis.stateful import precondition, rule

from ledger import keys
from tests.support.processes import wait_until
from tests.support.protocol.constants import CLOCK, KILL_MS, LEASE_MS, WINDOW_MS
from tests.support.protocol.model import ProtocolModel


class TimeAndRedis(ProtocolModel):
    """Time, the sweeper and Redis."""

    @rule(ms=st.sampled_from((200, WINDOW_MS + 1, LEASE_MS + 1, 4 * LEASE_MS)))
    def time_passes(self, ms: int) -> None:
        """Also how a worker pauses: it keeps its old token while time moves on."""
        self.now += ms
        self.real += ms
        self.redis.set(CLOCK, self.now)

    @precondition(lambda self: self.steps < 2)
    @rule(ms=st.sampled_from((KILL_MS + 1, LEASE_MS + 1, 4 * LEASE_MS)))
    def redis_clock_steps(self, ms: int) -> None:
        """Redis's clock steps forward (an NTP step, a VM restored, a failover to a replica
        ahead); no time passes for the workers and the sweeper (docs/DEPLOYMENT.md, Clocks)."""
        self.steps += 1
        self.now += ms
        self.redis.set(CLOCK, self.now)

    @rule()
    def sweeper_runs(self) -> None:
        """A pass of the looping sweeper (workers/sweeper.py sweep_once with its watch)."""
        self.gate.release()  # waiting payments whose reason is gone
        self.watch.read()
        for pk in self.redis.zrangebyscore(keys.DUE, "-inf", self.now):
            self.attempts.recover(pk.decode(), trusted_until_ms=self.watch.trusted_until_ms())

    @precondition(lambda self: self.restarts < 2)
    @rule()
    def redis_restarts_from_its_aof(self) -> None:
        self.restarts += 1
        self.server.kill()
        self.server.start()
        wait_until(self.loaded, what="Redis loaded its append-only file")
