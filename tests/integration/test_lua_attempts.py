"""The fulfilment scripts called directly: retries of the same call are harmless, a second
run of the same job is not let through, a person cannot race a call still in flight."""

import json

from redis import Redis

from ledger import keys, settings
from ledger.attempts import Attempts
from ledger.deliveries import Delivery, Ledger, new_request_id
from ledger.events import classify
from ledger.gate import Gate
from ledger.read import payments
from ledgerctl import render_attempts, samples
from tests.support.constants import BEARER
from tests.support.helpers import paid_event, purchase, run_captured


def queued_payment(redis_server, rng) -> tuple[Attempts, str]:
    s = settings.load(
        {}, REDIS_URL=redis_server.url, STRIPE_WEBHOOK_SECRET="whsec_x", STRIPE_MODE="test"
    )
    client = Redis.from_url(s.REDIS_URL)
    event, body = paid_event(rng)
    c = classify(event, s.policy)
    Ledger(client, s).record_delivery(Delivery(event, body, c, 0, "stripe", new_request_id()))
    return Attempts(client, s), str(c.payment_key)


def test_recover_retried_by_the_client_enqueues_once(redis: Redis, redis_server, rng) -> None:
    attempts, pk = queued_payment(redis_server, rng)
    redis.delete("rq:queue:fulfilment")
    job = attempts.jobs.prepare(pk)
    assert attempts.recover(pk, job) == attempts.recover(pk, job) == "requeued"
    assert redis.lrange("rq:queue:fulfilment", 0, -1) == [job.job_id.encode()]


def test_same_execution_may_retry_start_but_a_second_run_is_skipped(
    redis: Redis, redis_server, rng
) -> None:
    attempts, pk = queued_payment(redis_server, rng)
    first = attempts.start(pk, "job-1", replay_safe=True, execution="job-1:aaaa")
    retried = attempts.start(pk, "job-1", replay_safe=True, execution="job-1:aaaa")
    assert first == retried and (first.verdict, first.token) == ("go", 1)
    second_run = attempts.start(pk, "job-1", replay_safe=True, execution="job-1:bbbb")
    assert (second_run.verdict, second_run.token, second_run.reason) == ("skip", 0, "leased")
    assert redis.hget(keys.payment(pk), "token") == b"1"


def test_person_cannot_rerun_an_interrupted_call_that_may_be_in_flight(
    redis: Redis, redis_server, rng
) -> None:
    attempts, pk = queued_payment(redis_server, rng)
    start = attempts.start(pk, "job-1", replay_safe=False)
    assert attempts.mark_calling(pk, start.token)
    redis.hset(keys.payment(pk), "lease_until", 0)
    assert attempts.recover(pk) == "interrupted"
    verdict, until = attempts.record_decision(pk, "retry", ("interrupted",), "test")
    assert verdict == "wait" and int(until) > 0
    assert redis.hget(keys.payment(pk), "state") == b"interrupted"
    # its worker process is still in the call: the liveness key names it
    assert redis.get(keys.caller(attempts.caller)) == f"{pk} 1 {until}".encode()
    # the stalled worker comes back with its receipt: accepted, it proves the effect
    assert attempts.finish(pk, start.token, "fulfilled", '{"late": 1}', 5.0) == (
        "fulfilled",
        "fulfilled",
    )


def test_a_person_may_rerun_it_once_its_caller_is_gone(redis: Redis, redis_server, rng) -> None:
    """The liveness key is what the watchdog guarantees: it outlives the caller's process
    while that process is in the call. Gone (the process ended, or came back and finished),
    a person's retry is taken; a finished attempt releases it at once."""
    attempts, pk = queued_payment(redis_server, rng)
    start = attempts.start(pk, "job-1", replay_safe=False)
    assert attempts.mark_calling(pk, start.token)
    redis.hset(keys.payment(pk), "lease_until", 0)
    assert attempts.recover(pk) == "interrupted"
    assert attempts.record_decision(pk, "retry", ("interrupted",), "test")[0] == "wait"
    redis.delete(keys.caller(attempts.caller))  # its key expired with the process
    assert attempts.record_decision(pk, "retry", ("interrupted",), "test") == ("ok", "queued")
    again = attempts.start(pk, "job-2", replay_safe=False)
    assert attempts.mark_calling(pk, again.token)
    assert redis.get(keys.caller(attempts.caller)) is not None
    attempts.finish(pk, again.token, "interrupted", "read timeout", 5.0)
    assert redis.get(keys.caller(attempts.caller)) is None
    assert attempts.record_decision(pk, "retry", ("interrupted",), "test") == ("ok", "queued")


def test_a_fulfilled_attempt_keeps_no_caller_an_interrupted_one_does(
    redis: Redis, redis_server, rng
) -> None:
    """The caller names the process a person's retry waits for; once the effect is proven
    it is dropped from the record a fulfilled payment keeps for ever."""
    attempts, pk = queued_payment(redis_server, rng)
    start = attempts.start(pk, "job-1", replay_safe=False)
    assert attempts.mark_calling(pk, start.token)
    attempts.finish(pk, start.token, "interrupted", "read timeout", 5.0)
    kept = json.loads(redis.hget(keys.payment(pk), f"attempt:{start.token}"))
    assert kept["caller"] == attempts.caller
    assert attempts.record_decision(pk, "retry", ("interrupted",), "test") == ("ok", "queued")
    again = attempts.start(pk, "job-2", replay_safe=False)
    assert attempts.mark_calling(pk, again.token)
    assert attempts.finish(pk, again.token, "fulfilled", "{}", 5.0) == ("fulfilled", "fulfilled")
    record = json.loads(redis.hget(keys.payment(pk), f"attempt:{again.token}"))
    assert record["outcome"] == "fulfilled" and "caller" not in record


def test_a_decision_retried_by_the_client_is_applied_once(redis: Redis, redis_server, rng) -> None:
    attempts, pk = queued_payment(redis_server, rng)
    start = attempts.start(pk, "job-1", replay_safe=True)
    attempts.finish(pk, start.token, "failed", "http 400", 1.0)
    job = attempts.jobs.prepare(pk)
    first = attempts.record_decision(pk, "retry", ("failed",), "test", job)
    again = attempts.record_decision(pk, "retry", ("failed",), "test", job)
    assert first == again == ("ok", "queued")
    assert redis.hget(keys.STATS, "requeued:operator") == b"1"


def test_retention_purges_settled_payments_and_keeps_counts(
    redis: Redis, redis_server, rng
) -> None:
    import pytest

    with pytest.raises(ValueError, match="PAYMENT_RETENTION_DAYS"):
        settings.load({}, PAYMENT_RETENTION_DAYS=30, EVENT_RETENTION_DAYS=30)
    attempts, pk = queued_payment(redis_server, rng)
    start = attempts.start(pk, "job-1", replay_safe=True)
    attempts.finish(pk, start.token, "fulfilled", "{}", 1.0)
    kept = Attempts(
        attempts.redis, settings.load({}, REDIS_URL=redis_server.url, PAYMENT_RETENTION_DAYS=31)
    )
    assert kept.purge() == 0  # fulfilled just now
    redis.zadd(keys.state_index("fulfilled"), {pk: 1})  # as if it settled long ago
    assert kept.purge() == 1
    assert not redis.exists(keys.payment(pk))
    assert redis.hget(keys.PAYMENT_STATE_COUNTS, "fulfilled") == b"0"
    assert redis.zcard(keys.state_index("fulfilled")) == 0


def test_a_captured_job_is_the_job_rq_enqueues(redis: Redis, redis_server) -> None:
    from rq.job import Job

    from ledger.enqueue import FULFIL_JOB, Jobs

    s = settings.load({}, REDIS_URL=redis_server.url, STRIPE_MODE="test")
    jobs = Jobs(Redis.from_url(s.REDIS_URL), s)
    job = jobs.prepare("pi_b")
    assert redis.keys("*") == []  # captured, not sent
    run_captured(redis, job.commands)
    fetched = Job.fetch(job.job_id, connection=redis)
    assert (fetched.func_name, fetched.args, fetched.get_status()) == (
        FULFIL_JOB,
        ("pi_b",),
        "queued",
    )
    assert fetched.timeout == s.job_timeout_s and fetched.result_ttl == s.RQ_RESULT_TTL
    assert redis.lrange(f"rq:queue:{s.QUEUE_NAME}", 0, -1) == [job.job_id.encode()]


def test_attempts_live_in_the_payment_hash_and_a_retried_finish_counts_once(
    redis: Redis, redis_server, rng
) -> None:
    attempts, pk = queued_payment(redis_server, rng)
    first = attempts.start(pk, "job-1", replay_safe=True)
    assert attempts.finish(pk, first.token, "retry", "http 503", 2.0) == ("retry", "retrying")
    assert attempts.finish(pk, first.token, "retry", "http 503", 2.0) == ("already", "retrying")
    redis.hset(keys.payment(pk), "next_at", 0)
    second = attempts.start(pk, "job-2", replay_safe=True)
    receipt = '{"call_id": 7}'
    assert attempts.finish(pk, second.token, "fulfilled", receipt, 3.5) == (
        "fulfilled",
        "fulfilled",
    )
    assert attempts.finish(pk, second.token, "fulfilled", receipt, 3.5)[0] == "already"
    raw = redis.hgetall(keys.payment(pk))
    assert {b"attempt:1", b"attempt:2"} <= raw.keys() and b"stale_finishes" not in raw
    stored = json.loads(raw[b"attempt:2"])
    assert "detail" not in stored and "ended" not in stored  # kept once: receipt, fulfilled_at
    record = payments.payment(redis, pk)
    assert record is not None
    retried, done = record.attempts
    assert (retried.token, retried.outcome, retried.error) == (1, "retry", "http 503")
    assert (done.token, done.outcome, done.error) == (2, "fulfilled", None)
    assert record.receipt == json.loads(receipt)  # the fulfilled attempt's detail, kept once
    assert done.ended_at == record.fulfilled_at and done.call_ms == 3.5
    assert done.started_at is not None and done.duration_ms is not None
    assert done.call_started_at == done.started_at  # replay-safe: fenced from the start
    assert (record.attempts_started, record.attempts_finished) == (2, 2)
    assert record.paid_by == record.events[0].id and record.events[0].paid_the_payment
    assert redis.hget(keys.STATS, "attempts_finished") == b"2"


def unlinked_ledger(redis_server) -> tuple[settings.Settings, Ledger, Attempts]:
    s = settings.load(
        {},
        REDIS_URL=redis_server.url,
        STRIPE_WEBHOOK_SECRET="whsec_x",
        STRIPE_MODE="test",
        FULFIL_UNLINKED_INVOICES=True,
    )
    client = Redis.from_url(s.REDIS_URL)
    return s, Ledger(client, s), Attempts(client, s)


def deliver(s: settings.Settings, ledger: Ledger, event: dict) -> str:
    c = classify(event, s.policy)
    body = samples.encode(event)
    return ledger.record_delivery(
        Delivery(event, body, c, 0, "stripe", new_request_id())
    ).payment_key


def test_a_record_tied_to_a_fulfilled_twin_is_held_and_held_again_at_its_lease(
    redis: Redis, redis_server, rng
) -> None:
    """The invoice's record is fulfilled; the PaymentIntent's is queued (nothing matched
    them: here the amounts differ) when the session ties them: it is held at once, and
    when a person re-queues it anyway, held again when its attempt would start."""
    s, ledger, attempts = unlinked_ledger(redis_server)
    session, invoice, intent = purchase(rng, guest=True)
    intent["data"]["object"]["amount_received"] = 2001
    in_key = deliver(s, ledger, invoice)
    done = attempts.start(in_key, "job-in", replay_safe=True)
    assert attempts.finish(in_key, done.token, "fulfilled", "{}", 1.0)[0] == "fulfilled"
    pi_key = deliver(s, ledger, intent)
    assert redis.hget(keys.payment(pi_key), "state") == b"queued"
    deliver(s, ledger, session)
    assert redis.hget(keys.payment(pi_key), "state") == b"held"
    assert attempts.record_decision(pi_key, "retry", ("failed", "held"), "test") == ("ok", "queued")
    again = attempts.start(pi_key, "job-pi", replay_safe=True)
    assert (again.verdict, again.reason) == ("skip", "same_purchase")
    held = payments.payment(redis, pi_key)
    assert held is not None and held.state == "held" and held.attempts == []
    assert "when an attempt would have started" in (held.hold_reason or "")


def test_two_records_leased_before_their_tie_call_once(redis: Redis, redis_server, rng) -> None:
    """Both records of one purchase took a lease before Stripe tied them (nothing matched
    them: here the amounts differ): the tie changes neither, and at the fence the first to
    arrive is held for a person while the other calls."""
    s, ledger, attempts = unlinked_ledger(redis_server)
    session, invoice, intent = purchase(rng, guest=True)
    intent["data"]["object"]["amount_received"] = 2001
    in_key, pi_key = deliver(s, ledger, invoice), deliver(s, ledger, intent)
    first = attempts.start(in_key, "job-in", replay_safe=False)
    second = attempts.start(pi_key, "job-pi", replay_safe=False)
    assert first.verdict == second.verdict == "go"
    deliver(s, ledger, session)
    assert redis.hget(keys.payment(pi_key), "same_purchase_as") == in_key.encode()
    assert not attempts.mark_calling(in_key, first.token)
    assert attempts.mark_calling(pi_key, second.token)
    held = payments.payment(redis, in_key)
    assert held is not None and held.state == "held"
    assert (held.hold_reason or "").startswith(f"same purchase as {pi_key}")
    assert [a.outcome for a in held.attempts] == ["same_purchase"]


FULFILLED_PATH_BUDGET = {True: 47, False: 54}
"""Redis commands the scripts run for one payment fulfilled at the first attempt (gate,
start_attempt, mark_calling unless replay-safe, finish_attempt; docs/FULFILMENT.md): each
is paid on every payment, so a field read twice or a write that changes nothing shows here."""


def script_commands(redis: Redis) -> int:
    """Commands run since the last CONFIG RESETSTAT, less the client's own calls."""
    own = ("cmdstat_evalsha", "cmdstat_info", "cmdstat_config|resetstat")
    return sum(v["calls"] for k, v in redis.info("commandstats").items() if k not in own)


def test_a_fulfilled_payment_costs_its_scripts_no_more_commands_than_budgeted(
    redis: Redis, redis_server, rng
) -> None:
    for replay_safe, budget in FULFILLED_PATH_BUDGET.items():
        attempts, warm = queued_payment(redis_server, rng)  # the scripts loaded
        gate = Gate(attempts.redis, attempts.settings)
        for pk in (warm, queued_payment(redis_server, rng)[1]):
            redis.config_resetstat()
            assert gate.admit(pk, "job-1").verdict == "go"
            start = attempts.start(pk, "job-1", replay_safe=replay_safe)
            assert replay_safe or attempts.mark_calling(pk, start.token)
            done = attempts.finish(pk, start.token, "fulfilled", "{}", 5.0)
            assert done == ("fulfilled", "fulfilled")
        assert script_commands(redis) <= budget, replay_safe


def test_the_last_retry_of_a_payment_out_of_attempts_says_so(
    redis: Redis, redis_server, rng, client
) -> None:
    """Its worker said retry, and the ledger failed it for want of attempts: the attempt
    stays 'retry' (its worker's word, counted so), shown with why the payment is failed."""
    attempts, pk = queued_payment(redis_server, rng)
    state = "queued"
    while state != "failed":
        start = attempts.start(pk, f"job-{rng.random()}", replay_safe=True)
        state = attempts.finish(pk, start.token, "retry", "http 500", 1.0)[1]
        redis.hset(keys.payment(pk), "next_at", 0)
    record = payments.payment(redis, pk)
    assert record is not None and {a.outcome for a in record.attempts} == {"retry"}
    outcomes = [row["outcome"] for row in render_attempts.rows(record)]
    assert outcomes[-1].startswith("retry: no attempt left (failed)")
    assert not any("no attempt left" in o for o in outcomes[:-1])
    page = client.get(f"/ops/payments/{pk}", headers=BEARER).get_data(as_text=True)
    assert page.count("retry: no attempt left (failed)") == 1
    # marked as the failure it ended in, the retries before it not
    assert page.count('<span class="pill failed">retry: no attempt left (failed)') == 1
    assert page.count('<span class="pill failed">') == 1
    # failed for its lost jobs instead (recover.lua, job_failures): its last retry had
    # attempts left, and the page does not send a person after the downstream
    redis.hset(keys.payment(pk), "last_error", "its job failed 5 times before an attempt")
    record = payments.payment(redis, pk)
    assert record is not None
    assert not any("no attempt left" in row["outcome"] for row in render_attempts.rows(record))
