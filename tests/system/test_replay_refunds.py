"""scripts/replay_events.py's refunds and disputes against a real service (gunicorn, RQ
workers, the sweeper): ``--expect-once`` checks each payment's effect and each taken-back
payment's reversal, read from the built-in SQLite downstream's own tables."""

import sqlite3

from tests.support.replay import replay


def tables(env: dict[str, str]) -> sqlite3.Connection:
    return sqlite3.connect(env["FULFILMENT_ACTION"].removeprefix("sqlite:///"))


def reversing(stack, tmp_path, broken: bool = False, **more: str):
    """The service with REVERSAL_ACTION the built-in SQLite downstream of its effects, or
    (``broken``) a reversal that ignores its key, into the same file."""
    s = stack(TMP_REPORT=str(tmp_path / "report.json"), **more)
    orders = s.env["FULFILMENT_ACTION"]
    s.env["REVERSAL_ACTION"] = "tests.support.broken_actions:reverse_twice" if broken else orders
    s.env["BROKEN_DB"] = orders.removeprefix("sqlite:///")
    web = s.start_web()
    for _ in range(2):
        s.start_worker()
    s.start_sweeper()
    return s, f"{web.url}/webhooks/stripe"


def test_refunds_and_disputes_after_fulfilment_are_reversed_once(stack, redis, tmp_path) -> None:
    """18 payments, three of each kind: none, a full refund, a partial one, two partials
    adding up, a dispute lost, a dispute won; every event three times, shuffled."""
    s, url = reversing(stack, tmp_path)
    status, report = replay(s.env, url, "--scenario", "refunds", "--seed", "5", "--expect-once")
    assert status == 0 and report["findings"]["passed"]
    assert report["layers"]["reversals"] == {
        "source": "downstream (sqlite)",
        "refunded or disputed": 15,
        "taken back": 9,
        "reversed": 9,
        "refunded_unfulfilled": 0,
    }
    assert report["layers"]["payments"] == {"fulfilled": 9, "reversed": 9}
    db = tables(s.env)
    assert db.execute("SELECT COUNT(*) FROM orders").fetchone() == (18,)
    reversed_orders = "SELECT COUNT(*) FROM orders WHERE reversed_at IS NOT NULL"
    assert db.execute(reversed_orders).fetchone() == (9,)
    keys = [k for (k,) in db.execute("SELECT idempotency_key FROM reversals")]
    assert len(keys) == 9 and all(k.startswith("reverse:pi_") for k in keys)
    why = dict(db.execute("SELECT reversal ->> 'why', COUNT(*) FROM reversals GROUP BY 1"))
    assert why == {"refund": 6, "dispute": 3}


def test_each_refund_reversed_on_its_own_is_one_reversal_per_refund(stack, redis, tmp_path):
    """REVERSAL_PER_REFUND: the partial refunds are reversed too, and two partials are two
    reversals (``reverse:{pk}:{refund_id}``), each once; ``--expect-once`` expects one per
    refund, not one per payment."""
    s, url = reversing(stack, tmp_path, REVERSAL_PER_REFUND="true")
    status, report = replay(s.env, url, "--scenario", "refunds", "--seed", "5", "--expect-once")
    assert status == 0 and report["findings"]["passed"], report["findings"]
    assert report["findings"]["reversals"]["twice"] == []
    db = tables(s.env)
    keys = [k for (k,) in db.execute("SELECT idempotency_key FROM reversals")]
    # three of each: full (1), partial (1), two partials (2) by refund; dispute lost (1)
    assert len(keys) == len(set(keys)) == 15
    assert sum(k.count(":") == 2 for k in keys) == 12


def test_refunds_racing_fulfilment_never_fulfil_after_and_reverse_what_was(
    stack, redis, tmp_path
) -> None:
    """The refunds and disputes among the payments' own events, shuffled: a payment taken
    back before its fulfilment started is never called; one fulfilled is reversed once."""
    s, url = reversing(stack, tmp_path)
    status, report = replay(s.env, url, "--scenario", "refund-race", "--seed", "7", "--expect-once")
    assert status == 0 and report["findings"]["passed"]
    undone = report["layers"]["reversals"]
    assert undone["taken back"] == 9
    assert undone["reversed"] + undone["refunded_unfulfilled"] == 9
    found = report["findings"]["reversals"]
    assert found["called_after_refund"] == [] and found["twice"] == []
    db = tables(s.env)
    never = found["refunded_unfulfilled"]
    marks = ",".join("?" * len(never))
    assert db.execute(
        f"SELECT COUNT(*) FROM calls WHERE payment_key IN ({marks})", never
    ).fetchone() == (0,)
    assert db.execute("SELECT COUNT(*) FROM reversals").fetchone() == (undone["reversed"],)


def test_without_a_reversal_action_nothing_is_reversed(stack, redis, tmp_path) -> None:
    s = stack(TMP_REPORT=str(tmp_path / "report.json"))
    url = f"{s.start_web().url}/webhooks/stripe"
    s.start_worker()
    s.start_sweeper()
    status, report = replay(s.env, url, "--scenario", "refunds", "--seed", "5", "--expect-once")
    assert status == 0 and report["layers"]["payments"] == {"fulfilled": 18}
    assert report["layers"]["reversals"]["reversed"] == 0


def test_expect_once_fails_on_a_double_reversal(stack, redis, tmp_path) -> None:
    """A reversal downstream that ignores the reversal's key (two rows per call), into the
    built-in downstream's file, where the replay reads reversals."""
    s, url = reversing(stack, tmp_path, broken=True)
    status, report = replay(
        s.env,
        url,
        "--generate", "2", "--refunds", "--only", "charge.succeeded", "payment_intent.succeeded",
        "--expect-once",
        expect=1,
    )  # fmt: skip
    assert status == 1
    twice = report["findings"]["reversals"]["twice"]
    assert [t["reversals"] for t in twice] == [2]  # the second payment is refunded in full
