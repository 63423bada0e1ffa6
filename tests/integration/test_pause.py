"""Pausing and resuming fulfilment (ledger/gate.py) against a real Redis: each is one atomic
step, whoever presses them at the same moment (the dashboard, the ops API, the CLI)."""

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from redis import Redis

from ledger import keys, settings
from ledger.gate import Gate
from tests.support.constants import BASIC, BEARER, OPS_TOKEN
from tests.support.helpers import cli_ok, run_cli
from tests.support.processes import RedisServer
from webhook import create_app
from webhook.http import csrf_token

CSRF = {"X-CSRF-Token": csrf_token(OPS_TOKEN)}

ROUNDS = 3000


def test_a_pause_and_a_resume_at_the_same_moment_are_each_one_step(
    redis: Redis, redis_server: RedisServer
) -> None:
    """Regression: a pause was two commands (``HSETNX since``, then ``HSET by reason``); a
    resume between them deleted the key and the second re-created it without ``since``, so
    fulfilment stayed paused after the person was told "resumed" (413 of 3,000 rounds).
    Each round starts running and sends one pause and one resume at once: whichever Redis
    applies last decides, and the answers say which (a resume that found no pause came
    first), so the end state must follow from them, and a pause is always whole."""
    s = settings.load({}, REDIS_URL=redis_server.url)
    pauser, resumer = (Gate(Redis.from_url(redis_server.url), s) for _ in range(2))
    both = threading.Barrier(2)

    def pause() -> bool:
        both.wait()
        return pauser.pause("ops:alice", "race")

    def resume() -> bool:
        both.wait()
        return resumer.resume("cli:bob")

    wrong: Counter[str] = Counter()
    with ThreadPoolExecutor(2) as pool:
        for _ in range(ROUNDS):
            redis.delete(keys.PAUSE)
            paused, resumed = pool.submit(pause), pool.submit(resume)
            assert paused.result(), "the round's only pause found one"
            undone = resumed.result()
            held = {k.decode(): v.decode() for k, v in redis.hgetall(keys.PAUSE).items()}
            if held and not {"since", "by", "reason"} <= set(held):
                wrong["a pause without its since, by or reason"] += 1
            if undone == bool(held):
                wrong["paused after the resume that undid the pause"] += 1
    assert not wrong, f"{dict(wrong)} in {ROUNDS} rounds"


@pytest.fixture
def unconfirmed(config: dict[str, object]) -> dict[str, object]:
    """LEDGER_MIN_REPLICAS=1 on a Redis without replicas: no write is ever confirmed."""
    return {**config, "LEDGER_MIN_REPLICAS": 1, "LEDGER_WAIT_TIMEOUT": 0.05}


def test_a_pause_no_replica_confirms_is_told_as_such_not_as_paused(
    unconfirmed: dict[str, object], redis: Redis
) -> None:
    """The pause stands on the primary only, so a failover now could undo it: every way a
    person pauses or resumes says so (the CLI exits 3, the API and the dashboard answer 503
    not_replicated), never "paused" or "resumed"."""
    said = "is written on the primary, confirmed by 0 of 1 replicas within 0.05 s"
    result = run_cli(unconfirmed, "fulfilment", "pause", "--reason", "ERP upgrade")
    assert cli_ok(result, 3), result.output
    assert f"Not confirmed by the replicas: the pause {said}" in " ".join(result.output.split())
    assert redis.hget(keys.PAUSE, "reason") == b"ERP upgrade"  # on the primary
    client = create_app(unconfirmed).test_client()
    answer = client.post("/ops/api/fulfilment/resume", headers={**BEARER, **CSRF})
    assert answer.status_code == 503, answer.get_data(as_text=True)
    problem = answer.json
    assert problem["error"] == "not_replicated" and f"the resume {said}" in problem["message"]
    form = {"csrf_token": csrf_token(OPS_TOKEN), "reason": "again"}
    page = client.post("/ops/fulfilment/pause", data=form, headers=BASIC)
    assert page.status_code == 503
    assert f"Not confirmed: the pause {said}" in page.get_data(as_text=True)


def test_a_client_retry_of_a_pause_or_resume_answers_as_the_first_run(
    config: dict[str, object], redis: Redis
) -> None:
    """A reply lost on the way back is retried by redis-py on a new connection: the retry of
    a pause that went through is answered "paused" (not "already paused"), that of a resume
    "resumed" (not "was not paused"), and neither changes anything twice."""
    gate = Gate(redis, settings.load({}, REDIS_URL=config["REDIS_URL"]))
    for action, args in (("pause", {"by": "a", "reason": "r"}), ("resume", {"by": "b"})):
        script, request = gate.scripts[action], {**args, "request": f"{action}-1"}
        assert script({}, request) == 1
        before = redis.hgetall(keys.PAUSE), redis.hgetall(keys.RESUMED)
        assert script({}, request) == 1
        assert (redis.hgetall(keys.PAUSE), redis.hgetall(keys.RESUMED)) == before
        assert script({}, {**request, "request": f"{action}-2"}) == 0
