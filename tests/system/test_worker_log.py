"""The worker's log tells an incident's story as the dashboard does: one line per attempt
that ended, naming the payment, its leg, its token, the outcome and the payment's state,
with the error (redacted) when it did not apply; the sweeper names each payment whose
lease expired during the call. Before, a worker logged nothing of a payment through 500s,
429s, redirects and kills ("its process ended with exit code 137" was all)."""

import random
from collections.abc import Callable
from typing import Any

from redis import Redis

from ledger import keys
from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.ha import FulfilmentWorker
from tests.support.helpers import payment_key_of, state_of
from tests.support.inprocess import Fulfilment
from tests.support.processes import wait_until
from workers.sweeper import sweep_once


def test_the_procfile_worker_names_each_payment_and_how_its_attempt_ended(
    stack: Callable[..., Any], redis: Redis, tmp_path: Any
) -> None:
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url, FULFILMENT_REPLAY_SAFE="false")
        s.start_web()
        log = tmp_path / "fulfilment-worker.log"
        s.parts.add(FulfilmentWorker(s.env, log)).start()
        paid, failing = (samples.payment_events(random.Random(n))[2] for n in (1, 2))
        assert s.send(samples.encode(paid)).status_code == 200
        wait_until(lambda: state_of(redis, payment_key_of(paid)) == "fulfilled", what="fulfilled")
        downstream.go_down(500)
        assert s.send(samples.encode(failing)).status_code == 200
        pk = payment_key_of(failing)
        wait_until(lambda: state_of(redis, pk) == "interrupted", what="interrupted")
        wait_until(lambda: f"{pk} fulfilment token 1" in log.read_text(), what="its line")
        text = log.read_text()
        assert f"{payment_key_of(paid)} fulfilment token 1: fulfilled; call took " in text
        line = next(line for line in text.splitlines() if f"{pk} fulfilment token 1" in line)
        assert line.startswith("WARNING:") and ": interrupted; call took " in line, line
        assert f"interrupted: http 500 from http://127.0.0.1:{downstream.port}" in line, line


def test_the_sweeper_names_a_payment_whose_lease_expired_during_the_call(
    fulfilment: Callable[..., Fulfilment], redis: Redis, rng: random.Random, caplog: Any
) -> None:
    f = fulfilment(FULFILMENT_REPLAY_SAFE="false")
    event = samples.payment_events(rng)[2]
    pk = payment_key_of(event)
    f.deliver(event)
    start = f.attempts.start(pk, "job-1", replay_safe=False)
    assert f.attempts.mark_calling(pk, start.token)  # the worker is in its call, then dies
    redis.zadd(keys.DUE, {pk: 0})  # its lease has run out
    redis.hset(keys.payment(pk), "lease_until", 0)
    with caplog.at_level("WARNING", logger="webhook.sweeper"):
        assert sweep_once(f.attempts)["interrupted"] == 1
    said = [r.getMessage() for r in caplog.records if r.name == "webhook.sweeper"]
    assert f"{pk} interrupted: its lease expired during the downstream call" in said
