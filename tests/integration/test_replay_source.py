"""Which record the replay's checker counts effects from (ledgerctl/replay/downstream_source):
the SQLite downstream's file only when it exists and the workers' calls may have gone to it."""

from redis import Redis

from ledger import keys, settings
from ledger.downstream import downstream_name, open_downstream
from ledgerctl.replay.downstream_source import downstream_record


def test_the_sqlite_file_is_read_only_when_the_workers_may_have_called_it(
    redis: Redis, redis_server, tmp_path
) -> None:
    missing = tmp_path / "none.sqlite3"
    s = settings.load(
        {},
        REDIS_URL=redis_server.url,
        STRIPE_WEBHOOK_SECRET="whsec_x",
        FULFILMENT_ACTION=f"sqlite:///{missing}",
    )
    assert downstream_record(s, None, redis, ["pi_a"]) == (str(missing), None)  # not recorded
    redis.hset(keys.payment("pi_a"), "state", "fulfilled")
    db, note = downstream_record(s, None, redis, ["pi_a"])
    assert db is None and (note or "").startswith(f"no downstream record at {missing}:")
    assert not missing.exists()  # looked at, not made
    kept = tmp_path / "kept.sqlite3"
    open_downstream(kept).close()
    assert downstream_record(s, str(kept), redis, ["pi_a"]) == (str(kept), None)  # no calls yet
    redis.hset(keys.payment("pi_a"), "called_on", "postgresql:0123456789ab")
    db, note = downstream_record(s, str(kept), redis, ["pi_a"])
    assert db is None and (note or "").startswith("the workers' calls went to postgresql:")
    redis.hset(keys.payment("pi_b"), "called_on", f"{downstream_name(str(kept))} http:x")
    # (one of the two payments' calls went to this file: it is read)
    assert downstream_record(s, str(kept), redis, ["pi_a", "pi_b"]) == (str(kept), None)
