"""The purchase as an HTTP downstream receives it: a real RQ worker process POSTs it, and
the body it sent is valid against the published schema (webhook/openapi.yaml, Purchase)."""

from redis import Redis

from ledgerctl import samples
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import payment_key_of, state_of
from tests.support.processes import wait_until
from tests.support.purchases import EMAIL, NAME, ORDER, checkout_purchase, purchase_validator


def test_the_body_a_worker_posts_is_the_published_purchase(
    stack, redis: Redis, rng, tmp_path
) -> None:
    events = checkout_purchase(rng)
    pk = payment_key_of(events[2])
    with CountingDownstream() as downstream:
        s = stack(FULFILMENT_ACTION=downstream.url)
        s.start_web()
        for event in (events[3], *events[:3]):  # the session first: the worker comes after
            assert s.send(samples.encode(event)).status_code == 200
        s.start_worker()
        wait_until(lambda: state_of(redis, pk) == "fulfilled", what="fulfilled")
    [body] = downstream.bodies
    errors = [e.message for e in purchase_validator().iter_errors(body)]
    assert not errors
    assert downstream.idempotency_keys == [f"fulfil:{pk}"]
    assert (body["schema"], body["payment_key"], body["token"]) == (1, pk, 1)
    assert (body["client_reference_id"], body["customer_email"]) == (ORDER, EMAIL)
    assert body["checkout_session_id"] == events[3]["data"]["object"]["id"]
    assert body["metadata"]["checkout_session"] == {"order": ORDER, "source": "session"}
    assert "payment_method_details" not in str(body) and "last4" not in str(body)
    for log in ("web.log", "worker.log"):  # logs carry ids, never emails or names
        text = (tmp_path / log).read_text()
        assert pk in text or log == "web.log"
        assert EMAIL not in text and NAME not in text, log
