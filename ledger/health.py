"""What the alerts watch that the counters do not say: how long the longest-waiting payment
of each unfinished state has waited, how fulfilment attempts ended, the replicas online
against LEDGER_MIN_REPLICAS, Redis's memory against its maxmemory, and the sweeper's last
pass and reconcile schedule. Read at
scrape time by /metrics (webhook/metrics.py), from Redis, so every process agrees."""

from dataclasses import dataclass
from datetime import datetime

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import ResponseError

from ledger import keys
from ledger.replication import online_replicas
from ledger.stored import count, counts_of, decode_hash, ms_time

WAITING_STATES = ("queued", "in_progress", "retrying", "failed", "interrupted", "held")
"""States a paid payment waits in before it is fulfilled (``pending``: not paid yet, which
may last for ever; ``fulfilled``: done)."""
ATTEMPT_OUTCOMES = ("fulfilled", "retry", "failed", "interrupted", "not_called", "voided", "held")
"""How an attempt ends (FINISHED in ledger/lua/prelude.lua): voided is a settlement's, held a
reversal's."""


REQUEUE_REASONS = ("lost_job", "retry", "lease_expired", "operator")
"""Why a payment's job is enqueued again (``requeued:{why}`` in STATS: lua/recover.lua,
lua/operator.lua)."""


@dataclass(frozen=True)
class Health:
    oldest_age_s: dict[str, float]
    """Per WAITING_STATES: seconds since the longest-waiting payment entered it (0: none)."""
    attempt_outcomes: dict[str, int]
    replicas_online: int | None
    """Replicas ``INFO replication`` lists online; None where INFO is not allowed."""
    memory_used_bytes: int | None
    memory_max_bytes: int | None
    """``maxmemory`` (0: no limit; then Redis grows until the machine runs out)."""
    sweeper_last_pass_at: datetime | None
    reconcile_interval_s: float | None
    """What the last sweeper pass ran reconcile every (0: off); None: no pass recorded."""
    clock_steps: int
    """Forward steps of Redis's clock the looping sweepers saw (docs/DEPLOYMENT.md, Clocks)."""
    rejected_by_reason: dict[str, int]
    requeued: dict[str, int]
    """Jobs enqueued again, by why (REQUEUE_REASONS: the sweeper's lost_job, retry and
    lease_expired, a person's operator)."""
    run_id: str
    """The answering Redis server's ``run_id`` ('' where INFO is not allowed): another one
    after a restart or a failover, when the rejection counts kept in memory only
    (lua/record_rejection.lua) may have stepped back."""


def oldest_waiting(redis: Redis, at: datetime) -> dict[str, float]:
    """Per WAITING_STATES, seconds since the longest-waiting payment entered it (0: none):
    what webhook_payments_oldest_age_seconds, and WebhookFulfilmentStalled, read."""
    pipe = redis.pipeline(transaction=False)
    _ask_oldest(pipe)
    return _oldest(pipe.execute(), at)


def _ask_oldest(pipe: Pipeline) -> None:
    for state in WAITING_STATES:
        pipe.zrange(keys.state_index(state), 0, 0, withscores=True)


def _oldest(firsts: list, at: datetime) -> dict[str, float]:
    at_ms = at.timestamp() * 1000
    return {
        state: round(max(0.0, at_ms - first[0][1]) / 1000, 1) if first else 0.0
        for state, first in zip(WAITING_STATES, firsts, strict=True)
    }


def health(redis: Redis, at: datetime) -> Health:
    """The figures above, as of ``at`` (Redis's clock: ledger/read/stats.py ``now``), in one
    round trip (a scrape of each web process makes one)."""
    pipe = redis.pipeline(transaction=False)
    pipe.hgetall(keys.STATS)
    pipe.hgetall(keys.SWEEPER)
    _ask_oldest(pipe)
    pipe.info("replication")
    pipe.info("memory")
    pipe.info("server")
    *found, replication, memory, server = pipe.execute(raise_on_error=False)
    for answer in found:
        if isinstance(answer, Exception):
            raise answer
    stats, sweeper = decode_hash(found[0]), decode_hash(found[1])
    replicas, used, most = _info(replication, memory)
    return Health(
        oldest_age_s=_oldest(found[2:], at),
        attempt_outcomes={o: count(stats.get(f"attempt_outcome:{o}")) for o in ATTEMPT_OUTCOMES},
        replicas_online=replicas,
        memory_used_bytes=used,
        memory_max_bytes=most,
        sweeper_last_pass_at=ms_time(sweeper.get("last_ms")),
        reconcile_interval_s=(
            count(sweeper["reconcile_ms"]) / 1000 if "reconcile_ms" in sweeper else None
        ),
        clock_steps=count(sweeper.get("clock_steps")),
        rejected_by_reason=counts_of(stats, "rejected"),
        requeued={r: 0 for r in REQUEUE_REASONS} | counts_of(stats, "requeued"),
        run_id=server.get("run_id", "") if isinstance(server, dict) else "",
    )


def _info(
    replication: dict | Exception, memory: dict | Exception
) -> tuple[int | None, int | None, int | None]:
    """Replicas online, memory used and maxmemory; None each where INFO is refused (a
    managed Redis may rename or forbid it)."""
    info: dict = {}
    for answer in (replication, memory):
        if isinstance(answer, ResponseError):
            return None, None, None
        if isinstance(answer, Exception):
            raise answer
        info |= answer
    most = int(info["maxmemory"]) if "maxmemory" in info else None  # a proxy may omit it
    return online_replicas(info), int(info["used_memory"]), most
