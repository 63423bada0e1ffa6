"""Small helpers shared by tests: signed requests, ledger reads, the CLI in-process."""

import json
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
from click.testing import CliRunner, Result
from redis import Redis

from ledger import keys
from ledger import settings as settings_module
from ledger.attempts import Attempts
from ledger.deliveries import Delivery, new_request_id
from ledger.events import classify
from ledger.stored import text
from ledgerctl import samples
from tests.support.constants import SECRET, STRIPE_UA


def signed_headers(body: bytes, secret: str = SECRET, **kwargs: Any) -> dict[str, str]:
    return {
        "Content-Type": "application/json; charset=utf-8",
        "User-Agent": STRIPE_UA,
        "Stripe-Signature": samples.sign(body, secret, **kwargs),
    }


def purchase(
    rng: random.Random, customer: str = "cus_000000000000001", guest: bool = False
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A payment-mode Checkout session with invoice creation (API basil and later): the
    session carries the PaymentIntent and the invoice; invoice.paid has no PaymentIntent.
    By a guest, the session and the PaymentIntent name no customer (the invoice does: Stripe
    makes one for it), so no customer's fingerprint ties the PaymentIntent to the invoice."""
    pi = samples.random_id(rng, "pi")
    invoice_id = samples.random_id(rng, "in")
    buyer = None if guest else customer
    session = samples.event_of_type(rng, "checkout.session.completed")
    session["data"]["object"].update(
        payment_intent=pi, invoice=invoice_id, customer=buyer, amount_total=2000
    )
    invoice = samples.event_of_type(rng, "invoice.paid")
    invoice["data"]["object"].update(
        id=invoice_id, payment_intent=None, customer=customer, amount_paid=2000, currency="usd"
    )
    intent = samples.event_of_type(rng, "payment_intent.succeeded")
    intent["data"]["object"].update(id=pi, customer=buyer, amount_received=2000, currency="usd")
    return session, invoice, intent


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stripe"
INVOICE_PAYMENT = FIXTURES / "invoice_payment.paid.json"


def basil_renewal(
    rng: random.Random, customer: str = "cus_000000000000001", amount: int = 2000
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A subscription's renewal as API 2025-03-31.basil and later send it: ``invoice.paid``
    (no ``payment_intent``; its subscription under ``parent``), ``payment_intent.succeeded``
    and ``charge.succeeded`` (no ``invoice``), and ``invoice_payment.paid``, the one event
    that ties the invoice to its PaymentIntent."""
    pi, charge = samples.random_id(rng, "pi"), samples.random_id(rng, "ch")
    invoice_id, sub = samples.random_id(rng, "in"), samples.random_id(rng, "sub")
    invoice = samples.event_of_type(rng, "invoice.paid")
    invoice["api_version"] = "2025-03-31.basil"
    invoice["data"]["object"].update(
        id=invoice_id,
        payment_intent=None,
        charge=None,
        subscription=None,
        parent={"type": "subscription_details", "subscription_details": {"subscription": sub}},
        billing_reason="subscription_cycle",
        customer=customer,
        amount_paid=amount,
        amount_due=amount,
        currency="usd",
    )
    intent = samples.event_of_type(rng, "payment_intent.succeeded")
    intent["api_version"] = "2025-03-31.basil"
    intent["data"]["object"].update(
        id=pi, invoice=None, customer=customer, amount_received=amount, currency="usd"
    )
    paid_charge = samples.event_of_type(rng, "charge.succeeded")
    paid_charge["api_version"] = "2025-03-31.basil"
    paid_charge["data"]["object"].update(
        id=charge, payment_intent=pi, invoice=None, customer=customer, amount=amount
    )
    tie = json.loads(INVOICE_PAYMENT.read_text())
    tie["id"] = samples.random_id(rng, "evt")
    tie["data"]["object"].update(
        id=samples.random_id(rng, "inpay"),
        invoice=invoice_id,
        payment={"type": "payment_intent", "payment_intent": pi},
        amount_paid=amount,
        amount_requested=amount,
    )
    return invoice, intent, paid_charge, tie


def paid_event(rng: random.Random) -> tuple[dict[str, Any], bytes]:
    event = samples.payment_events(rng)[2]
    return event, samples.encode(event)


def deliver_live_payment(base: str, rng: random.Random) -> str:
    """POST one signed paid live-mode event (STRIPE_MODE's default) to the server at
    ``base``, answered 200; its payment key."""
    event = samples.payment_events(rng)[2]
    event["livemode"] = True
    body = samples.encode(event)
    answer = requests.post(
        f"{base}/webhooks/stripe", data=body, headers=signed_headers(body), timeout=30
    )
    assert answer.status_code == 200, answer.text
    return str(event["data"]["object"]["id"])


def delivery(event: dict[str, Any], body: bytes, request_id: str | None = None) -> Delivery:
    """What the receiver hands the ledger for ``event`` once it has verified it."""
    return Delivery(
        event=event,
        body=body,
        classified=classify(event, settings_module.load({}, STRIPE_MODE="test").policy),
        secret_label="primary",
        source="stripe",
        request_id=request_id or new_request_id(),
    )


def stats(redis: Redis) -> dict[str, int]:
    return {text(k): int(v) for k, v in redis.hgetall(keys.STATS).items()}


def ledger_keys(redis: Redis) -> set[str]:
    return {k.decode() for k in redis.scan_iter(match="*")}


def payment_key_of(event: dict[str, Any]) -> str:
    """The PaymentIntent id of a sample payment event."""
    return str(event["data"]["object"]["id"])


def state_of(redis: Redis, payment_key: str) -> str:
    value = redis.hget(keys.payment(payment_key), "state")
    return text(value) if value else ""


def settled_as(redis: Redis, payment_key: str, state: str) -> bool:
    """In ``state`` and no longer due for the sweeper."""
    return state_of(redis, payment_key) == state and redis.zscore(keys.DUE, payment_key) is None


def sweeps(redis: Redis) -> int:
    """Sweeper passes completed so far (any sweeper)."""
    return int(redis.hget(keys.SWEEPER, "sweeps") or 0)


def after_sweeps(redis: Redis, passes: int = 2) -> None:
    """Wait until the sweeper has completed ``passes`` more passes: progress, not time."""
    from tests.support.processes import wait_until

    target = sweeps(redis) + passes
    wait_until(lambda: sweeps(redis) >= target, what=f"{passes} more sweeps")


def watching_sweeper(stack: Any, redis: Redis) -> None:
    """Start a looping sweeper on ``stack`` and wait until it has watched Redis's clock for
    a lease: until then it ends no lease (docs/DEPLOYMENT.md, "Clocks"), and a test that
    times a lease's end against a stalled worker needs it ending them."""
    from tests.support.processes import wait_until

    before = sweeps(redis)
    stack.start_sweeper()
    wait_until(lambda: sweeps(redis) > before, what="the sweeper's first pass")
    watched = time.monotonic()
    lease_s = float(stack.env["LEASE_SECONDS"])
    wait_until(lambda: time.monotonic() - watched > lease_s, what="a lease watched")


def fail_payment(redis: Redis, config: dict, payment_key: str, state: str = "failed") -> None:
    """Put a payment in ``state`` through the real scripts (a worker's attempt that fails)."""
    s = settings_module.load({}, **{k: v for k, v in config.items() if k == "REDIS_URL"})
    attempts = Attempts(Redis.from_url(s.REDIS_URL), s)
    start = attempts.start(payment_key, "job-test", replay_safe=state != "interrupted")
    assert start.verdict == "go"
    if state == "interrupted":
        attempts.mark_calling(payment_key, start.token)
        redis.hset(keys.payment(payment_key), "lease_until", 0)
        assert attempts.recover(payment_key) == "interrupted"
    else:
        attempts.finish(payment_key, start.token, "failed", "http 400: bad request", 1.0)


def run_cli(env: Mapping[str, object], *args: str) -> Result:
    """``webhook-ledger ARGS`` in-process (Click's CliRunner), settings from ``env`` (a test's
    config as it is: each value is given as its string)."""
    from ledgerctl.cli import main

    return CliRunner().invoke(main, list(args), env={k: str(v) for k, v in env.items()})


def cli_ok(result: Result, code: int = 0) -> bool:
    """The command ended with ``code`` and without a traceback."""
    clean = result.exception is None or isinstance(result.exception, SystemExit)
    return clean and result.exit_code == code


def post_webhook(web_url: str, body: bytes) -> int | str:
    """POST a signed delivery; its status, or the name of the error when none came."""
    try:
        return requests.post(
            f"{web_url}/webhooks/stripe", data=body, headers=signed_headers(body), timeout=15
        ).status_code
    except requests.RequestException as exc:
        return type(exc).__name__


@contextmanager
def in_background(target: Callable[[], None], stop: threading.Event) -> Iterator[None]:
    """Run ``target`` in a daemon thread while the block runs; then set ``stop`` and wait."""
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def run_captured(redis: Redis, commands: list[Any]) -> None:
    """Send captured RQ commands, ``(n, arg1..argn)*``, as run_commands reads them."""
    words = list(commands)
    while words:
        count, words = words[0], words[1:]
        redis.execute_command(*words[:count])
        words = words[count:]
