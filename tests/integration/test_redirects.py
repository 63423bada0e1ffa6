"""The HTTP action follows no redirect (workers/actions.py HttpAction), against a real local
downstream that redirects every POST: a 3xx answer is its own outcome, ambiguous (the
request reached a server that may have acted on it), so a payment is never fulfilled from
another URL's answer, its purchase never re-sent elsewhere, and a non-replay-safe one is
called once; a permanent move names the misconfiguration, and a worker's start finds it
with one HEAD. Before, requests followed them: a 303 to a status page answering 503 twice
made three calls, a 301 or 302 to a page answering 200 fulfilled with no effect, a 307 or
308 re-POSTed the signed purchase to another host."""

from pathlib import Path

import pytest

from ledger import settings as settings_module
from ledger.read import payments as read_payments
from tests.support.downstream_server import CountingDownstream
from tests.support.inprocess import Fulfilment
from tests.support.processes import free_port
from workers.actions import moved, unusable

from .test_jobs import pay, work_until

SECRET_PATH = "/login/PATHSECRET?next=SECRET123"


def origin_of(downstream: CountingDownstream) -> str:
    return downstream.url.removesuffix("/fulfil")


def last_error(f: Fulfilment, pk: str) -> str:
    record = read_payments.payment(f.redis, pk)
    assert record is not None
    return record.last_error or ""


def test_a_303_to_a_status_page_answering_503_is_one_call(fulfilment, redis, rng) -> None:
    """The downstream created the order, then sent the client to a status page that fails
    twice: requests turned that into three calls (three orders) before."""
    with CountingDownstream() as downstream:
        downstream.redirect = (303, "/orders/ord_1/status")
        downstream.pages = [503, 503]
        f = fulfilment(FULFILMENT_ACTION=downstream.url, MAX_ATTEMPTS="5")
        pk = pay(f, rng)
        work_until(f, redis, pk, "interrupted")
        f.sweep()
        f.work()
        assert downstream.calls[pk] == 1 and downstream.visits == []
        origin = origin_of(downstream)
        assert last_error(f, pk) == (
            f"http 303 from {origin}: a redirect (Location on {origin}), not followed"
        )


@pytest.mark.parametrize("status", [301, 302])
def test_a_redirect_to_a_page_answering_200_is_never_fulfilled(
    status: int, fulfilment, redis, rng
) -> None:
    """An endpoint that moved (301: http to https, a new host) or an auth proxy's 302 to its
    login page: requests turned the POST into a GET, the page answered 200 and the payment
    was `fulfilled` with no effect."""
    with CountingDownstream() as downstream:
        downstream.redirect = (status, f"https://shop.example{SECRET_PATH}")
        f = fulfilment(FULFILMENT_ACTION=downstream.url)
        pk = pay(f, rng)
        work_until(f, redis, pk, "interrupted")
        assert downstream.calls[pk] == 1 and downstream.visits == []
        assert downstream.successes[pk] == 0
        error = last_error(f, pk)
        said = f"http {status} from {origin_of(downstream)}"
        if status == 301:
            assert error == (
                f"{said}: the endpoint moved (Location on https://shop.example:443); "
                "FULFILMENT_ACTION should name the new URL"
            )
        else:
            assert (
                error == f"{said}: a redirect (Location on https://shop.example:443), not followed"
            )
        assert "PATHSECRET" not in error and "SECRET123" not in error and "/login" not in error


@pytest.mark.parametrize("status", [307, 308])
@pytest.mark.parametrize("replay_safe", [False, True])
def test_a_307_or_308_to_another_port_re_posts_nothing_there(
    status: int, replay_safe: bool, fulfilment, redis, rng
) -> None:
    """307 and 308 keep the method and body: requests re-POSTed the signed purchase and its
    Idempotency-Key wherever Location said, another host included. A replay-safe action
    retries its own URL (a 3xx is ambiguous) until its attempts are spent."""
    with CountingDownstream() as downstream, CountingDownstream() as elsewhere:
        downstream.redirect = (status, elsewhere.url)
        f = fulfilment(
            FULFILMENT_ACTION=downstream.url,
            FULFILMENT_REPLAY_SAFE=str(replay_safe).lower(),
            MAX_ATTEMPTS="3",
        )
        pk = pay(f, rng)
        work_until(f, redis, pk, "failed" if replay_safe else "interrupted")
        assert downstream.calls[pk] == (3 if replay_safe else 1)
        assert sum(elsewhere.calls.values()) == 0 and elsewhere.visits == []
        assert f"http {status} from {origin_of(downstream)}" in last_error(f, pk)


@pytest.mark.parametrize(
    ("status", "refused"), [(301, True), (308, True), (302, False), (307, False)]
)
def test_a_workers_start_refuses_an_endpoint_that_moved_for_good(
    status: int, refused: bool
) -> None:
    """One HEAD, no purchase: a permanent move stops the worker's start with the reason; a
    temporary redirect (a proxy's login page may be the only answer to a HEAD) is left to
    the calls, which end the payment `interrupted` with it."""
    with CountingDownstream() as downstream:
        downstream.redirect = (status, f"https://shop.example{SECRET_PATH}")
        url = downstream.url + "?token=SECRET123"
        why = unusable(settings_module.load({}, FULFILMENT_ACTION=url, FULFILMENT_TIMEOUT=1.0))
        assert downstream.visits == [("HEAD", "/fulfil?token=SECRET123")]
        assert not downstream.bodies
    if refused:
        assert why == (
            "FULFILMENT_ACTION",
            f"http {status} from {origin_of(downstream)}: the endpoint moved (Location on "
            "https://shop.example:443); FULFILMENT_ACTION should name the new URL",
        )
    else:
        assert why is None


def test_a_workers_start_refuses_a_reversal_endpoint_that_moved_for_good_naming_it(
    tmp_path: Path,
) -> None:
    """REVERSAL_ACTION's URL is checked as FULFILMENT_ACTION's, and the refusal names it."""
    with CountingDownstream() as downstream:
        downstream.redirect = (308, f"https://shop.example{SECRET_PATH}")
        s = settings_module.load(
            {},
            FULFILMENT_ACTION=f"sqlite:///{tmp_path / 'downstream.sqlite3'}",
            REVERSAL_ACTION=downstream.url + "?token=SECRET123",
            FULFILMENT_TIMEOUT=1.0,
        )
        why = unusable(s)
        assert downstream.visits == [("HEAD", "/fulfil?token=SECRET123")]
    assert why == (
        "REVERSAL_ACTION",
        f"http 308 from {origin_of(downstream)}: the endpoint moved (Location on "
        "https://shop.example:443); REVERSAL_ACTION should name the new URL",
    )


def test_no_answer_at_start_is_left_to_the_calls() -> None:
    assert moved(f"http://127.0.0.1:{free_port()}/fulfil", 1.0) is None
    with CountingDownstream() as downstream:
        assert moved(downstream.url, 1.0) is None


@pytest.mark.parametrize(
    ("location", "named"),
    [("javascript:alert(1)", "***"), ("//other.example/x?k=v", "http://other.example:80")],
)
def test_an_odd_location_is_named_by_origin_or_masked(location: str, named: str) -> None:
    with CountingDownstream() as downstream:
        downstream.redirect = (308, location)
        why = moved(downstream.url, 1.0)
    assert why is not None and f"(Location on {named})" in why


@pytest.mark.parametrize("location", ["http://[::1/x", "http://h.example:99999/x"])
def test_a_location_that_is_no_url_is_an_answer_like_any_redirect(
    location: str, fulfilment, redis, rng
) -> None:
    """requests parses a 3xx's Location to prepare the next request even when it follows
    none, and raised ValueError on one it could not parse, out of the action (the job
    crashed): the action's session prepares none, so it is a redirect like any other."""
    with CountingDownstream() as downstream:
        downstream.redirect = (308, location)
        said = f"http 308 from {origin_of(downstream)}: the endpoint moved (Location on ***)"
        assert (moved(downstream.url, 1.0) or "").startswith(said)
        f = fulfilment(FULFILMENT_ACTION=downstream.url)
        pk = pay(f, rng)
        work_until(f, redis, pk, "interrupted")
        assert downstream.calls[pk] == 1 and last_error(f, pk).startswith(said)
