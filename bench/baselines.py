"""The receivers ours is compared against, under the same gunicorn settings (bench/intake.py).

bare_app        A: the bare endpoint; reads the body, answers 200
ping_app        A': the same plus one Redis PING, nothing stored
store_app       A'': the same plus one SET of the body, no check: the floor of storing
quickstart_app  B: as Stripe's quick-start guides write it: ``construct_event`` (verify,
                then a StripeObject tree), then one SET of the payload; no ledger, no job
peer_app        C, the peer: what users write instead, Stripe's and RQ's quick-starts put
                together: ``construct_event``, ``SET NX`` of the event id with a 30-day
                expiry to drop duplicates, and for ``payment_intent.succeeded``
                ``Queue.enqueue(fulfil, payment_intent_id, job_id=...)``; a JSON answer

gunicorn -c gunicorn.conf.py bench.baselines:bare_app
"""

import os

import redis
import stripe
from flask import Flask, Response, jsonify, request
from rq import Queue

ANSWER = b'{"received": true}'
store = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
"""Connects lazily, after gunicorn forks."""

bare_app = Flask("bare")
ping_app = Flask("ping")
store_app = Flask("store")
quickstart_app = Flask("quickstart")
peer_app = Flask("peer")
peer_queue = Queue("peer", connection=store)
PEER_DEDUP_SECONDS = 30 * 86400


@bare_app.post("/webhooks/stripe")
def bare() -> Response:
    request.get_data()
    return Response(ANSWER, status=200, mimetype="application/json")


@ping_app.post("/webhooks/stripe")
def ping() -> Response:
    request.get_data()
    store.ping()
    return Response(ANSWER, status=200, mimetype="application/json")


@store_app.post("/webhooks/stripe")
def store_body() -> Response:
    store.set(f"bench:body:{os.urandom(8).hex()}", request.get_data())
    return Response(ANSWER, status=200, mimetype="application/json")


def construct_event() -> stripe.Event | tuple[Response, int]:
    """The quick-starts' first step: the event, or the 400 they answer."""
    secret = os.environ["STRIPE_WEBHOOK_SECRET"].split(",")[0]
    try:
        return stripe.Webhook.construct_event(
            request.data, request.headers.get("Stripe-Signature"), secret
        )
    except ValueError:
        return jsonify(error="invalid payload"), 400
    except stripe.SignatureVerificationError:
        return jsonify(error="invalid signature"), 400


@quickstart_app.post("/webhooks/stripe")
def quickstart() -> tuple[Response, int] | Response:
    event = construct_event()
    if not isinstance(event, stripe.Event):
        return event
    store.set(f"stripe:event:{event['id']}", request.data)
    return jsonify(success=True)


def fulfil(payment_intent_id: str) -> None:
    """The peer's job (the benchmark measures intake: it is enqueued, never run)."""


@peer_app.post("/webhooks/stripe")
def peer() -> tuple[Response, int] | Response:
    event = construct_event()
    if not isinstance(event, stripe.Event):
        return event
    if not store.set(f"peer:event:{event.id}", 1, nx=True, ex=PEER_DEDUP_SECONDS):
        return jsonify(received=True, duplicate=True)
    if event.type == "payment_intent.succeeded":
        payment_intent_id = event.data.object.id
        peer_queue.enqueue(fulfil, payment_intent_id, job_id=f"fulfil-{payment_intent_id}")
    return jsonify(received=True)
