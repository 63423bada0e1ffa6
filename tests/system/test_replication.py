"""The ledger on a replicated Redis (ledger/connection.py, ledger/replication.py), against
real redis-server and redis-sentinel processes: the client follows Sentinel to a new
primary, a write counts only once LEDGER_MIN_REPLICAS replicas confirm it, and a promoted
replica knows every fencing token a worker acted on."""

import random
from collections.abc import Callable
from typing import Any

import pytest
from redis import Redis

from ledger import keys, settings
from ledger.attempts import Attempts
from ledger.connection import close, connect
from ledger.deliveries import Ledger, LedgerUnavailable
from ledger.gate import Gate
from ledger.replication import NotReplicated
from ledger.scripts import Script
from tests.support.ha import Cluster
from tests.support.helpers import delivery, paid_event, payment_key_of, state_of
from workers import jobs

pytestmark = pytest.mark.timeout(180)


def load(cluster: Cluster, **overrides: object) -> settings.Settings:
    env = {"REDIS_URL": "redis://127.0.0.1:1/0", **cluster.env}  # only Sentinel can work
    fast = {"LEASE_SECONDS": 3, "FULFILMENT_TIMEOUT": 1.0}
    return settings.load(env, STRIPE_MODE="test", **fast, **overrides)


def test_the_client_follows_the_sentinels_to_a_new_primary(cluster: Cluster) -> None:
    s = load(cluster, LEDGER_MIN_REPLICAS=1)
    redis = connect(s)
    ledger = Ledger(redis, s)
    rng = random.Random(1)
    first, first_body = paid_event(rng)
    assert ledger.record_delivery(delivery(first, first_body)).deliveries == 1
    old = cluster.primary()
    cluster.kill(old)
    new = cluster.wait_failover(old)
    second, second_body = paid_event(rng)
    # The same client and scripts: a new connection asks the Sentinels, and the scripts are
    # loaded again on the new primary (SCRIPT LOAD is not replicated).
    assert ledger.record_delivery(delivery(second, second_body)).deliveries == 1
    with cluster.client(new) as primary:
        assert primary.hget(keys.event(first["id"]), "n") == b"1"  # it had reached a replica
        assert primary.hget(keys.event(second["id"]), "n") == b"1"
    close(redis)


def test_a_write_no_replica_confirms_is_answered_unavailable(cluster: Cluster) -> None:
    """Replicas frozen, min-replicas-to-write off: the primary takes the write, WAIT finds
    no replica, the caller is told (a 503 for a delivery), and the write stands on the
    primary, so Stripe's retry counts as a duplicate."""
    cluster.configure("min-replicas-to-write", "0")
    s = load(cluster, LEDGER_MIN_REPLICAS=1, LEDGER_WAIT_TIMEOUT=0.3)
    primary = cluster.primary()
    ledger = Ledger(Redis(port=primary), s)
    event, body = paid_event(random.Random(2))
    replicas = [p for p in cluster.topology.node_ports if p != primary]
    for port in replicas:
        cluster.pause(port)
    with pytest.raises(LedgerUnavailable, match="confirmed by 0 of 1 replicas within 0.3 s"):
        ledger.record_delivery(delivery(event, body))
    for port in replicas:
        cluster.resume(port)
    cluster.wait_online(primary, replicas=2)
    assert ledger.record_delivery(delivery(event, body)).duplicate
    ledger.redis.close()


def twice(script: Script, advanced: list[bool]) -> None:
    """Every call of ``script`` runs twice (a client retry whose first reply was lost);
    ``advanced`` gets whether the second run moved the primary's replication offset."""
    first_run: Callable[..., Any] = script.run

    def run(keys: list[str], args: list[Any], client: Any = None) -> Any:
        first_run(keys, args)
        offset = script.redis.info("replication")["master_repl_offset"]
        again = first_run(keys, args)
        advanced.append(script.redis.info("replication")["master_repl_offset"] > offset)
        return again

    script.run = run  # type: ignore[method-assign]


def test_a_replayed_answer_is_written_again(cluster: Cluster) -> None:
    """A client retry of a call whose reply was lost runs on a new connection, and WAIT is
    documented to wait for that connection's own writes: each replayed answer (the same
    request id, attempt, finish, decision) writes once more, so the retry's WAIT covers the
    first call's write."""
    s = load(cluster)
    redis = Redis(port=cluster.primary())
    ledger, attempts = Ledger(redis, s), Attempts(redis, s)
    advanced: list[bool] = []
    event, body = paid_event(random.Random(3))
    pk = payment_key_of(event)
    twice(ledger.record_script, advanced)
    ledger.record_delivery(delivery(event, body))
    for name in ("start_attempt", "finish_attempt", "operator"):
        twice(attempts.scripts[name], advanced)
    start = attempts.start(pk, "job-1", replay_safe=False)
    assert (start.verdict, start.token) == ("go", 1)
    assert attempts.finish(pk, start.token, "interrupted", "cut", 1.0) == ("already", "interrupted")
    decided = attempts.record_decision(pk, "fulfilled", ("interrupted",), "test")
    assert decided == ("ok", "fulfilled")
    assert advanced == [True] * 4
    redis.close()


def freeze_replicas(cluster: Cluster, primary: int, redis: Redis) -> list[int]:
    """SIGSTOP both replicas and cut them off: a frozen replica would still read what its
    socket had received. Returns their ports."""
    replicas = [p for p in cluster.topology.node_ports if p != primary]
    for port in replicas:
        cluster.pause(port)
    redis.client_kill_filter(_type="replica")
    return replicas


@pytest.mark.parametrize(("min_replicas", "calls"), [(1, 1), (0, 2)])
def test_a_promoted_replica_knows_every_token_a_worker_acted_on(
    cluster: Cluster, min_replicas: int, calls: int
) -> None:
    """Replicas frozen and cut off while a worker takes the lease and fences its call (not
    replay-safe), then the primary dies and a replica is promoted. With LEDGER_MIN_REPLICAS=1
    the lease is not confirmed, so the worker never calls, and the promoted replica hands
    out the token once: one call. With 0 the worker calls, the promoted replica never saw
    the token, hands it out again and a second worker calls too."""
    cluster.configure("min-replicas-to-write", "0")
    s = load(cluster, LEDGER_MIN_REPLICAS=min_replicas)
    old = cluster.primary()
    redis = Redis(port=old)
    attempts = Attempts(redis, s)
    event, body = paid_event(random.Random(4))
    pk = payment_key_of(event)
    Ledger(redis, s).record_delivery(delivery(event, body))  # replicated: replicas are up
    called = 0
    replicas = freeze_replicas(cluster, old, redis)
    cluster.wait_online(old, replicas=0)
    try:
        start = attempts.start(pk, "job-1", replay_safe=False)
        called += start.verdict == "go" and attempts.mark_calling(pk, start.token)
    except NotReplicated:
        pass  # the worker does not go on: workers.jobs
    cluster.kill(old)
    for port in replicas:
        cluster.resume(port)
    new = cluster.wait_failover(old)
    with cluster.client(new) as promoted:
        assert state_of(promoted, pk) == "queued"  # the lease never reached it
        again = Attempts(promoted, s).start(pk, "job-2", replay_safe=False)
        assert again.verdict == "go"
        called += Attempts(promoted, s).mark_calling(pk, again.token)
    assert called == calls
    redis.close()


class CountingAction:
    """A not replay-safe downstream that only counts its calls."""

    replay_safe = False

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, call: Any) -> dict[str, Any]:
        self.calls += 1
        return {"ok": True}


def test_a_fence_no_replica_confirms_is_not_called(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's lease is confirmed, then the replicas freeze before its fence: the fence
    reaches the primary only, so the worker does not call and records ``not_called`` (its
    own wait fails too, but the primary has it: the payment is retried, not interrupted)."""
    cluster.configure("min-replicas-to-write", "0")
    s = load(cluster, LEDGER_MIN_REPLICAS=1, LEDGER_WAIT_TIMEOUT=0.3)
    primary = cluster.primary()
    redis = Redis(port=primary)
    attempts = Attempts(redis, s)
    event, body = paid_event(random.Random(6))
    pk = payment_key_of(event)
    Ledger(redis, s).record_delivery(delivery(event, body))
    action = CountingAction()
    context = jobs.Context(
        attempts,
        Gate(redis, s),
        action,
        "",
        timeout=1.0,
        kill_after=0.5,
        call_window=1.0,
        attempt_s=s.attempt_s,
        reads=None,
    )
    frozen: list[int] = []

    def freeze_after_lease(name: str) -> None:
        if name == "after_lease":
            frozen.extend(freeze_replicas(cluster, primary, redis))

    monkeypatch.setattr(jobs, "context", lambda: context)
    monkeypatch.setattr(jobs, "fault", freeze_after_lease)
    with pytest.raises(NotReplicated):  # the not_called record's own wait
        jobs.fulfil_payment(pk)
    assert frozen and action.calls == 0
    assert state_of(redis, pk) == "retrying"
    assert '"outcome":"not_called"' in redis.hget(keys.payment(pk), "attempt:1").decode()
    for port in frozen:
        cluster.resume(port)
    redis.close()
