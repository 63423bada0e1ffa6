"""A replay-safe action's refusal applied nothing: refunded in full after it, the payment
ends ``refunded_unfulfilled`` and its reversal is never called, as after a refusal of an
action that is not replay-safe. A call whose answer never came stays one that may have
applied, whatever later calls answer: held for a person, who looks and says so
(``resolve --not-applied``: refunded_unfulfilled, no reversal). The real job, the real
scripts and a real redis-server in this process."""

import random
from collections.abc import Callable, Iterator

import pytest
from redis import Redis

from ledger import keys
from ledger.read import payments
from ledger.stored import text
from ledgerctl import samples
from tests.integration.test_jobs import work_until
from tests.support import refusing_actions
from tests.support.constants import BEARER
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import run_cli
from tests.support.inprocess import Fulfilment
from tests.support.refunds import refund_events

REFUSE = "tests.support.refusing_actions:refuse"


@pytest.fixture
def reversal() -> Iterator[CountingDownstream]:
    """REVERSAL_ACTION's downstream, which counts its calls."""
    with CountingDownstream() as downstream:
        yield downstream


@pytest.fixture
def answers() -> Iterator[list[str]]:
    """What the refusing action answers, call after call (the last repeated)."""
    refusing_actions.CALLS.clear()
    yield refusing_actions.ANSWERS
    refusing_actions.ANSWERS[:] = ["give_up"]


def field(redis: Redis, pk: str, name: str) -> str:
    return text(redis.hget(keys.payment(pk), name) or b"")


def paid(f: Fulfilment, rng: random.Random) -> tuple[str, int]:
    event = samples.payment_events(rng)[2]
    f.deliver(event)
    return str(event["data"]["object"]["id"]), int(event["data"]["object"]["amount_received"])


def refunded_in_full(f: Fulfilment, rng: random.Random, pk: str, amount: int) -> str:
    for event in refund_events(rng, pk, amount, amount):
        f.deliver(event)
    return field(f.redis, pk, "state")


@pytest.mark.parametrize(
    ("answer", "state"),
    [("give_up", "failed"), ("retry_later", "retrying"), ("refused", "retrying")],
)
def test_a_refusal_then_a_refund_in_full_ends_refunded_unfulfilled_never_reversed(
    answer: str,
    state: str,
    answers: list[str],
    reversal: CountingDownstream,
    fulfilment: Callable[..., Fulfilment],
    redis: Redis,
    rng: random.Random,
) -> None:
    """GiveUp (failed), RetryLater or DownstreamDown(sent=False) (retrying) from a callable
    declared @replay_safe: the same end as the same callable without it, no call of the
    reversal."""
    answers[:] = [answer]
    f = fulfilment(FULFILMENT_ACTION=REFUSE, REVERSAL_ACTION=reversal.url, MAX_ATTEMPTS="5")
    pk, amount = paid(f, rng)
    f.work()
    assert field(redis, pk, "state") == state and refusing_actions.CALLS[pk] == 1
    assert refunded_in_full(f, rng, pk, amount) == "refunded_unfulfilled"
    assert field(redis, pk, "called_on") == ""  # its call was refused: nothing applied there
    f.work()
    f.sweep()
    f.work()
    assert field(redis, pk, "state") == "refunded_unfulfilled"
    assert reversal.calls[pk] == 0 and refusing_actions.CALLS[pk] == 1


def test_a_downstream_down_whose_request_left_may_have_applied_held_when_refunded(
    answers: list[str],
    reversal: CountingDownstream,
    fulfilment: Callable[..., Fulfilment],
    redis: Redis,
    rng: random.Random,
) -> None:
    """DownstreamDown with its default ``sent``: the request may have reached the shop (its
    gateway's 502 after the grant committed), so the call is no refusal. Refunded in full,
    the payment is held for a person to look, never closed as never fulfilled."""
    answers[:] = ["down"]
    f = fulfilment(FULFILMENT_ACTION=REFUSE, REVERSAL_ACTION=reversal.url, MAX_ATTEMPTS="5")
    pk, amount = paid(f, rng)
    f.work()
    assert field(redis, pk, "state") == "retrying" and field(redis, pk, "called_on") != ""
    assert refunded_in_full(f, rng, pk, amount) == "held"
    assert "may have applied it: check the downstream" in field(redis, pk, "hold_reason")
    f.work()
    f.sweep()
    f.work()
    assert field(redis, pk, "state") == "held"
    assert reversal.calls[pk] == 0 and refusing_actions.CALLS[pk] == 1


def test_an_http_422_of_a_replay_safe_downstream_then_a_refund_is_refunded_unfulfilled(
    reversal: CountingDownstream,
    fulfilment: Callable[..., Fulfilment],
    redis: Redis,
    rng: random.Random,
) -> None:
    with CountingDownstream(script=[422]) as shop:
        f = fulfilment(
            FULFILMENT_ACTION=shop.url,
            FULFILMENT_REPLAY_SAFE="true",
            REVERSAL_ACTION=reversal.url,
        )
        pk, amount = paid(f, rng)
        f.work()
        assert field(redis, pk, "state") == "failed" and shop.calls[pk] == 1
        assert refunded_in_full(f, rng, pk, amount) == "refunded_unfulfilled"
        f.work()
        assert reversal.calls[pk] == 0 and shop.calls[pk] == 1


def test_a_call_that_may_have_applied_stays_so_after_a_refusal_until_a_person_looks(
    answers: list[str],
    reversal: CountingDownstream,
    fulfilment: Callable[..., Fulfilment],
    redis: Redis,
    rng: random.Random,
    client,
) -> None:
    """A crash (no answer: it may have applied), then GiveUp: a refund in full holds it; a
    retry holds it again, no call; a person who found no effect says so: refunded_unfulfilled,
    their word kept, the reversal never called. Said again, or of a payment not held after
    it was taken back, refused."""
    answers[:] = ["crash", "give_up"]
    f = fulfilment(FULFILMENT_ACTION=REFUSE, REVERSAL_ACTION=reversal.url, MAX_ATTEMPTS="5")
    pk, amount = paid(f, rng)
    work_until(f, redis, pk, "failed")
    assert refusing_actions.CALLS[pk] == 2 and field(redis, pk, "called_on") != ""
    assert refunded_in_full(f, rng, pk, amount) == "held"
    assert "may have applied" in field(redis, pk, "hold_reason")
    shown = run_cli({}, "payment", pk).stdout
    assert f"webhook-ledger resolve {pk} --not-applied" in shown, shown
    assert run_cli({}, "resolve", pk, "--retry").exit_code == 0
    f.work()
    assert field(redis, pk, "state") == "held" and refusing_actions.CALLS[pk] == 2

    said = run_cli({}, "resolve", pk, "--not-applied")
    assert said.exit_code == 0 and said.stdout.startswith(f"{pk}: refunded_unfulfilled"), said
    f.work()
    f.sweep()
    record = payments.payment(redis, pk)
    assert record is not None and record.state == "refunded_unfulfilled"
    assert record.resolution is not None and record.resolution.by == "cli"
    assert record.resolution.decision == "not_applied" and record.resolution.from_state == "held"
    assert record.resolution.meant == "found not applied: refunded_unfulfilled"
    assert reversal.calls[pk] == 0 and refusing_actions.CALLS[pk] == 2
    again = run_cli({}, "resolve", pk, "--not-applied")
    assert again.exit_code == 1 and "refused" in again.stdout

    # the ops API takes it too, and refuses it for a payment not taken back
    other, other_amount = paid(f, rng)
    work_until(f, redis, other, "failed")
    url = f"/ops/api/payments/{other}/resolve?as=not_applied"
    refused = client.post(url, headers=BEARER)
    assert refused.status_code == 409 and refused.get_json()["error"] == "refused"  # failed
    assert run_cli({}, "retry", other).exit_code == 0
    work_until(f, redis, other, "failed")
    assert refunded_in_full(f, rng, other, other_amount) == "held"
    ok = client.post(url, headers=BEARER)
    assert ok.status_code == 200, ok.get_json()
    assert ok.get_json() == {"payment_key": other, "state": "refunded_unfulfilled"}
    assert reversal.calls[other] == 0


def test_not_applied_is_refused_for_a_hold_that_was_not_taken_back(
    fulfilment: Callable[..., Fulfilment], redis: Redis, rng: random.Random, client
) -> None:
    """Held without a refund (FULFILMENT_ACTION moved after a call that may have applied):
    nothing says it is not owed, so not applied is refused and nothing changes."""
    f = fulfilment()
    pk, _ = paid(f, rng)
    redis.delete("rq:queue:fulfilment")
    start = f.attempts.start(pk, "job-1", True, downstream="sqlite:one")
    f.attempts.finish(pk, start.token, "retry", "no answer", 1.0)
    redis.hset(keys.payment(pk), "next_at", 0)
    moved = f.attempts.start(pk, "job-2", True, downstream="sqlite:two")
    assert (moved.reason, field(redis, pk, "state")) == ("moved", "held")
    answer = client.post(f"/ops/api/payments/{pk}/resolve?as=not_applied", headers=BEARER)
    assert answer.status_code == 409 and answer.get_json()["error"] == "not_taken_back"
    said = run_cli({}, "resolve", pk, "--not-applied")
    assert said.exit_code == 1 and "not held so" in said.stdout, said.stdout
    assert field(redis, pk, "state") == "held" and field(redis, pk, "resolved_by") == ""
