"""Which record the replay's checker counts effects from (ledgerctl/replay/downstream_source):
the SQLite downstream's file only when it exists and the workers' calls went to it."""

from redis import Redis

from ledger import keys, settings
from ledger.downstream import downstream_name, open_downstream
from ledgerctl.replay.downstream_source import downstream_record


def test_the_sqlite_file_is_read_only_when_the_workers_called_it(
    redis: Redis, redis_server, tmp_path
) -> None:
    missing, kept = tmp_path / "none.sqlite3", tmp_path / "kept.sqlite3"
    s = settings.load(
        {},
        REDIS_URL=redis_server.url,
        STRIPE_WEBHOOK_SECRET="whsec_x",
        FULFILMENT_ACTION=f"sqlite:///{kept}",
    )
    open_downstream(kept).close()
    assert downstream_record(s, None, redis, ["pi_a"]) == (str(kept), None)  # not recorded
    redis.hset(keys.payment("pi_a"), mapping={"state": "queued", "token": 0})
    assert downstream_record(s, None, redis, ["pi_a"]) == (str(kept), None)  # none called
    redis.hset(keys.payment("pi_a"), mapping={"state": "interrupted", "token": 1})
    db, note = downstream_record(s, None, redis, ["pi_a"])  # called, recorded nowhere
    assert db is None and (note or "").startswith(
        f"the workers' calls went to a downstream that records none (not SQLite), not to {kept}"
    )
    redis.hset(keys.payment("pi_a"), "called_on", "postgresql:0123456789ab")
    db, note = downstream_record(s, None, redis, ["pi_a"])
    assert db is None and (note or "").startswith("the workers' calls went to postgresql:")
    db, note = downstream_record(s, str(missing), redis, ["pi_a"])  # given: read all the same
    assert db == str(missing) and note == (
        f"no downstream record at {missing}: read all the same (--downstream-db)"
    )
    assert not missing.exists()  # looked at, not made
    redis.hset(keys.payment("pi_b"), mapping={"token": 1, "called_on": downstream_name(str(kept))})
    assert downstream_record(s, None, redis, ["pi_a", "pi_b"]) == (str(kept), None)
