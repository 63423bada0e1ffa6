"""Which downstream an attempt names: the HTTP action by a digest of its whole URL (no
secret shown), ``on`` kept on the record of an attempt that may apply the effect, and
``held`` an outcome only a reversal's attempt may end with (tests/integration/
test_reversal_moved.py relies on these). The real job in this process and a real
redis-server."""

import base64
import random
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest
from redis import Redis

from ledger import keys
from ledger.gate import Gate, Health
from ledger.purchase import purchase_of
from ledger.stored import text
from ledgerctl import samples
from tests.integration.test_lua_reversal import reversed_then_won
from tests.support.inprocess import Fulfilment
from tests.support.refunds import refund_events
from workers.actions import downstream_of
from workers.http_action import HttpAction


def field(redis: Redis, pk: str, name: str) -> str:
    return text(redis.hget(keys.payment(pk), name) or b"")


def record(redis: Redis, pk: str, token: int) -> dict[str, Any]:
    return orjson.loads(redis.hget(keys.payment(pk), f"attempt:{token}") or b"{}")


def test_a_changed_url_path_is_another_downstream_and_names_no_secret() -> None:
    """The HTTP action is named by a digest of its whole URL: a new path or host is a move
    (a capability URL's path may be its secret, so it is never shown)."""

    def name(url: str) -> str:
        return downstream_of(HttpAction(url, 1.0, False))

    one = name("https://shop.example/hooks/s3cret/fulfil")
    assert one == name("https://shop.example/hooks/s3cret/fulfil")
    assert one != name("https://shop.example/hooks/other/fulfil")
    assert one != name("https://shop2.example/hooks/s3cret/fulfil")
    assert one.startswith("http:") and "s3cret" not in one and "shop" not in one


def test_the_attempt_that_may_apply_the_effect_names_its_downstream(
    redis: Redis,
    fulfilment: Callable[..., Fulfilment],
    config: dict[str, object],
    rng: random.Random,
) -> None:
    """``on`` is kept on the record of an attempt that may apply the effect, unless it is
    replay-safe and its downstream is the payment's only ``called_on``; never on one that
    makes no call nor on a reversal's. The payment hash gains no field of it."""
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"], MAX_ATTEMPTS="9")
    paid = samples.payment_events(rng)[2]
    pk, amount = str(paid["data"]["object"]["id"]), int(paid["data"]["object"]["amount_received"])
    f.deliver(paid)
    redis.delete("rq:queue:fulfilment")
    fields = set(redis.hkeys(keys.payment(pk)))

    def attempt(replay_safe: bool, downstream: str, outcome: str = "retry") -> dict[str, Any]:
        start = f.attempts.start(pk, "job", replay_safe, downstream=downstream)
        assert replay_safe or f.attempts.mark_calling(pk, start.token)
        f.attempts.finish(pk, start.token, outcome, "{}", 1.0)
        redis.hset(keys.payment(pk), "next_at", 0)
        return record(redis, pk, start.token)

    start = f.attempts.start_without_call(pk, "job-0")
    f.attempts.finish(pk, start.token, "retry", "cannot load", 0.0)
    redis.hset(keys.payment(pk), "next_at", 0)
    assert "on" not in record(redis, pk, start.token)
    assert "on" not in attempt(True, "sqlite:one")  # called_on says it
    assert "on" not in attempt(True, "sqlite:one")
    # moved: one's calls may have applied there, unknown to two's key: held, not called,
    # though two is not replay-safe (before: fenced and called, a second effect)
    moved = f.attempts.start(pk, "job-m", False, downstream="http:two")
    assert (moved.verdict, moved.reason, field(redis, pk, "state")) == ("skip", "moved", "held")
    assert field(redis, pk, "moved_from") == "sqlite:one"
    # a person found nothing there: the calls from now on are the new downstream's alone
    assert f.attempts.record_decision(pk, "retry", ("held",), "person")[0] == "ok"
    assert field(redis, pk, "called_on") == field(redis, pk, "moved_from") == ""
    assert attempt(False, "http:two")["on"] == "http:two"  # no called_on for it
    assert "on" not in attempt(True, "sqlite:three", "fulfilled")
    assert field(redis, pk, "called_on") == "sqlite:three"
    for event in refund_events(rng, pk, amount, amount):
        f.deliver(event)
    start = f.attempts.start(pk, "job-r", True, leg="reverse", downstream="http:four")
    assert start.verdict == "go" and "on" not in record(redis, pk, start.token)
    added = set(redis.hkeys(keys.payment(pk))) - fields
    assert not [k for k in added if k == b"on" or k.startswith(b"on:")]


def test_held_is_a_reversals_outcome_alone(
    fulfilment: Callable[..., Fulfilment], redis: Redis, rng: random.Random
) -> None:
    f = fulfilment()
    paid = samples.payment_events(rng)[2]
    pk = str(paid["data"]["object"]["id"])
    f.deliver(paid)
    start = f.attempts.start(pk, "job-1", True)
    with pytest.raises(Exception, match="held is a reversal"):
        f.attempts.finish(pk, start.token, "held", "not called", 0.0)
    assert field(redis, pk, "state") == "in_progress"


class Echo(BaseHTTPRequestHandler):
    """A downstream that answers 200 with what it was sent: its path and Authorization."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        said = f"applied {self.path} auth={self.headers['Authorization']} ".encode() * 10
        self.send_response(200)
        self.send_header("Content-Length", str(len(said)))
        self.end_headers()
        self.wfile.write(said)

    def log_message(self, *args: object) -> None:
        pass


def test_a_receipt_keeps_no_secret_of_the_url_the_answer_quotes() -> None:
    """A 2xx's body is kept in the receipt (the API, dashboard, CLI and bundle show it): a
    downstream quoting its request must not put the URL's path, query or userinfo there."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        url = f"http://dsuser:pw-S3cr3t@127.0.0.1:{port}/hook/CAPTOK123/x;p=PARAM9?key=QRYTOK456"
        receipt = HttpAction(url, 5.0, False)(
            purchase_of("pi_1", 1, {"amount": "100", "currency": "usd", "events": "evt_1"})
        )
    finally:
        server.shutdown()
        server.server_close()
    body = receipt["body"]
    assert receipt["status"] == 200 and body.startswith("applied ***") and len(body) == 200
    basic = base64.b64encode(b"dsuser:pw-S3cr3t").decode()
    for secret in ("CAPTOK123", "PARAM9", "QRYTOK456", "pw-S3cr3t", basic, basic[:12]):
        assert secret not in body


def test_a_call_that_never_left_is_not_where_the_effect_may_be(
    redis: Redis, fulfilment: Callable[..., Fulfilment], rng: random.Random
) -> None:
    """A replay-safe attempt whose request never left (refused before sending, reported to
    the breaker; or its worker never called) takes its downstream off ``called_on`` again:
    the action moving after it holds nothing (before: held as "may have applied there")."""
    f = fulfilment(MAX_ATTEMPTS="9")
    gate = Gate(redis, f.settings)
    paid = samples.payment_events(rng)[2]
    pk = str(paid["data"]["object"]["id"])
    f.deliver(paid)

    def attempt(downstream: str, how: str) -> str:
        start = f.attempts.start(pk, f"job-{rng.random()}", True, downstream=downstream)
        assert start.verdict == "go", start
        if how == "refused":  # workers/gating.py reports before the outcome
            gate.report(pk, start.token, Health("down", sent=False), "refused")
        outcome = "not_called" if how == "not_called" else "retry"
        f.attempts.finish(pk, start.token, outcome, how, 1.0)
        assert "reached" not in record(redis, pk, start.token)  # kept only while it calls
        redis.hset(keys.payment(pk), "next_at", 0)
        return field(redis, pk, "called_on")

    assert attempt("sqlite:one", "refused") == ""
    assert attempt("sqlite:two", "not_called") == ""  # moved, nothing held
    assert attempt("sqlite:three", "ambiguous") == "sqlite:three"
    assert attempt("sqlite:three", "refused") == "sqlite:three"  # an earlier call may have
    moved = f.attempts.start(pk, "job-m", True, downstream="sqlite:four")
    assert (moved.reason, field(redis, pk, "moved_from")) == ("moved", "sqlite:three")


def test_a_fulfilment_again_is_held_when_the_action_moved_after_its_own_call(
    redis_server: Any, rng: random.Random
) -> None:
    """A fulfilment again after a dispute won has its own key (refulfil:{pk}): a call of it
    that may have applied on one downstream holds the next on another (before: called
    there too, granted twice); the fulfilment's own calls (``called_on``) never do."""
    shop = reversed_then_won(redis_server, rng)
    shop.redis.hset(keys.payment(shop.pk), "called_on", "db:a")  # where it was fulfilled
    start = shop.attempts.start(shop.pk, "job-1", True, leg="refulfil", downstream="db:b")
    assert start.verdict == "go"  # the action moved since the fulfilment: nothing of its key
    shop.attempts.finish(shop.pk, start.token, "retry", "reset after sending", 1.0)
    assert shop.field("refulfil_on") == "db:b"
    shop.redis.hset(keys.payment(shop.pk), "next_at", 0)
    moved = shop.attempts.start(shop.pk, "job-2", True, leg="refulfil", downstream="db:c")
    assert (moved.reason, shop.state(), shop.field("moved_from")) == ("moved", "held", "db:b")
