"""scripts/replay_events.py's refunds and disputes against a real service (gunicorn, RQ
workers, the sweeper): ``--expect-once`` checks each payment's effect and each taken-back
payment's reversal, read from the built-in SQLite downstream's own tables."""

import sqlite3

import pytest

from ledger import keys
from tests.support.downstream_server import CountingDownstream
from tests.support.replay import replay


def tables(env: dict[str, str]) -> sqlite3.Connection:
    return sqlite3.connect(env["FULFILMENT_ACTION"].removeprefix("sqlite:///"))


def orders_keyed(db: sqlite3.Connection, prefix: str) -> set[str]:
    """The payments with an order under ``{prefix}{payment_key}`` (one at most: the key is
    the table's primary key); an order under any other key with that prefix fails."""
    found = set()
    for pk, key in db.execute("SELECT payment_key, idempotency_key FROM orders"):
        if key.startswith(prefix):
            assert key == f"{prefix}{pk}"
            found.add(pk)
    return found


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


def test_a_dispute_lost_reversed_then_won_is_granted_again_once(stack, redis, tmp_path) -> None:
    """REVERSAL_DISPUTE_WON=fulfil, the dispute-won scenario: 12 payments, three each with no
    dispute, a dispute lost, a dispute won, a dispute lost and (once reversed) won; every
    event three times, shuffled. Each payment has one order, each lost dispute one reversal,
    each dispute won after its loss one re-grant (``refulfil:{pk}``), counted apart."""
    s, url = reversing(stack, tmp_path, REVERSAL_DISPUTE_WON="fulfil")
    status, report = replay(s.env, url, "--scenario", "dispute-won", "--seed", "5", "--expect-once")
    assert status == 0 and report["findings"]["passed"], report["findings"]
    assert report["layers"]["payments"] == {"fulfilled": 9, "reversed": 3}
    assert report["layers"]["reversals"] == {
        "source": "downstream (sqlite)",
        "refunded or disputed": 9,
        "taken back": 6,
        "reversed": 6,
        "refunded_unfulfilled": 0,
        "won after loss": 3,
        "re-granted": 3,
    }
    downstream = report["layers"]["downstream"]
    assert (downstream["effects"], downstream["regrants"]) == (12, 3)
    db = tables(s.env)
    first, again = orders_keyed(db, "fulfil:"), orders_keyed(db, "refulfil:")
    assert len(first) == 12 and len(again) == 3
    reversed_for = dict(db.execute("SELECT payment_key, reversal ->> 'why' FROM reversals"))
    assert len(reversed_for) == 6 and set(reversed_for.values()) == {"dispute"}
    assert again < set(reversed_for)
    applied = "SELECT COUNT(*) FROM reversal_calls WHERE outcome = 'applied'"
    assert db.execute(applied).fetchone() == (6,)
    stats = redis.hgetall(keys.STATS)
    counted = [stats[name] for name in (b"reinstated", b"refulfils_due", b"refulfilled")]
    assert counted == [b"3", b"3", b"3"]


def test_by_default_a_dispute_won_after_its_reversal_is_held_for_a_person(
    stack, redis, tmp_path
) -> None:
    """REVERSAL_DISPUTE_WON=hold (the default): the same replay leaves the payments reversed
    then won held for a person, never re-granted; ``--expect-once`` names them (waiting for a
    person, as an interrupted payment is) and exits 1."""
    s, url = reversing(stack, tmp_path)
    status, report = replay(
        s.env, url, "--scenario", "dispute-won", "--seed", "5", "--expect-once", expect=1
    )
    assert report["layers"]["payments"] == {"fulfilled": 6, "reversed": 3, "held": 3}
    found = report["findings"]["reversals"]
    assert (found["won_after_loss"], found["regranted"], found["not_regranted"]) == (3, 0, [])
    assert len(found["for_a_person"]) == 3 and found["twice"] == found["missing"] == []
    for pk in found["for_a_person"]:
        reason = redis.hget(keys.payment(pk), "hold_reason").decode()
        assert reason.startswith("dispute won after its reversal")
    db = tables(s.env)
    assert orders_keyed(db, "refulfil:") == set()
    assert len(orders_keyed(db, "fulfil:")) == 12
    assert db.execute("SELECT COUNT(*) FROM reversals").fetchone() == (6,)


@pytest.mark.parametrize("race", [False, True], ids=["settled", "racing"])
def test_a_refund_failed_after_it_was_taken_back_is_held_for_a_person(
    stack, redis, tmp_path, race
) -> None:
    """``--refund-kinds none full full_failed``: 6 payments, two each with no refund, a refund
    in full, a refund in full that (once the payment is settled) failed; every event three
    times, shuffled; ``racing``: each refund right after its payment's own events. The
    payments given back are held for a person (after their reversal, or refunded before any
    effect), never left taken back nor fulfilled again; ``--expect-once`` lists them as
    waiting for a person and exits 1."""
    s, url = reversing(stack, tmp_path)
    status, report = replay(
        s.env,
        url,
        "--generate", "6", "--refunds", "--refund-kinds", "none", "full", "full_failed",
        *(["--race-refunds"] if race else []),
        "--copies", "3", "--shuffle", "--concurrency", "8", "--seed", "5", "--expect-once",
        expect=1,
    )  # fmt: skip
    payments = report["layers"]["payments"]
    assert (payments["fulfilled"], payments["held"]) == (2, 2), payments
    assert payments.get("reversed", 0) + payments.get("refunded_unfulfilled", 0) == 2
    undone = report["layers"]["reversals"]
    assert (undone["taken back"], undone["given back"]) == (4, 2)
    found = report["findings"]["reversals"]
    assert found["not_held"] == [] and found["twice"] == found["missing"] == []
    assert found["called_after_refund"] == [] and found["orphaned"] == []
    assert report["findings"]["ok"] and not report["findings"]["passed"]
    held = found["for_a_person"]
    assert len(held) == 2
    for pk in held:
        payment = {k.decode(): v.decode() for k, v in redis.hgetall(keys.payment(pk)).items()}
        assert payment["state"] == "held" and payment["by_hand"] == "1"
        assert payment["reinstated_at"] and "refund failed" in payment["hold_reason"]
    db = tables(s.env)
    assert orders_keyed(db, "refulfil:") == set()
    # an order for each payment not refunded, and for each reversed (once each)
    assert len(orders_keyed(db, "fulfil:")) == 2 + undone["reversed"]
    reversed_for = [pk for (pk,) in db.execute("SELECT payment_key FROM reversals")]
    assert len(reversed_for) == len(set(reversed_for)) == undone["reversed"]
    # each given back once, however many events told of its failure
    assert redis.hget(keys.STATS, "reinstated") == str(len(held)).encode()
    if not race:
        assert undone["reversed"] == 4 and set(held) < set(reversed_for)


def test_expect_once_fails_on_a_re_grant_applied_twice(stack, redis, tmp_path) -> None:
    """A fulfilment downstream that applies a re-grant after a dispute won twice (two rows
    under ``refulfil:`` keys): one payment, lost, reversed, then won."""
    s = stack(TMP_REPORT=str(tmp_path / "report.json"), REVERSAL_DISPUTE_WON="fulfil")
    orders = s.env["FULFILMENT_ACTION"]
    s.env.update(
        FULFILMENT_ACTION="tests.support.broken_actions:regrant_twice",
        REVERSAL_ACTION=orders,
        BROKEN_DB=orders.removeprefix("sqlite:///"),
    )
    url = f"{s.start_service().url}/webhooks/stripe"
    status, report = replay(
        s.env,
        url,
        "--generate", "1", "--refunds", "--refund-kinds", "dispute_lost_won",
        "--downstream-db", s.env["BROKEN_DB"], "--expect-once",
        expect=1,
    )  # fmt: skip
    [twice] = report["findings"]["duplicated"]
    assert (twice["effects"], twice["regrants"]) == (1, 2)
    assert report["findings"]["reversals"]["regranted"] == 1


def test_without_a_downstream_record_the_ledger_says_what_was_reversed_and_re_granted(
    stack, redis, tmp_path
) -> None:
    """HTTP actions, no SQLite record to read: ``--expect-once`` reads each payment's effect,
    reversal and re-grant from the ledger's own marks, not from its state alone (a payment
    reversed had its effect; one fulfilled again was reversed before)."""
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        s = stack(
            TMP_REPORT=str(tmp_path / "report.json"),
            FULFILMENT_ACTION=fulfil.url,
            REVERSAL_ACTION=reverse.url,
            REVERSAL_DISPUTE_WON="fulfil",
        )
        url = f"{s.start_service().url}/webhooks/stripe"
        status, report = replay(
            s.env, url, "--scenario", "dispute-won", "--seed", "5", "--expect-once"
        )
    assert status == 0 and report["findings"]["passed"], report["findings"]
    assert report["layers"]["reversals"]["source"] == "ledger"
    assert report["layers"]["reversals"]["re-granted"] == 3
    downstream = report["layers"]["downstream"]
    assert (downstream["effects"], downstream["regrants"]) == (12, 3)
    assert (fulfil.calls.total(), reverse.calls.total()) == (15, 6)
