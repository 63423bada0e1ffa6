"""The receivers ours is compared against, under the same gunicorn settings (bench/intake.py).

bare_app        A: the bare endpoint; reads the body, answers 200
ping_app        A': the same plus one Redis PING, nothing stored
store_app       A'': the same plus one SET of the body, no check: the floor of storing
quickstart_app  B: as Stripe's quick-start guides write it: ``construct_event`` (verify,
                then a StripeObject tree), then one SET of the payload; no ledger, no job

gunicorn -c gunicorn.conf.py bench.baselines:bare_app
"""

import os

import redis
import stripe
from flask import Flask, Response, jsonify, request

ANSWER = b'{"received": true}'
store = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
"""Connects lazily, after gunicorn forks."""

bare_app = Flask("bare")
ping_app = Flask("ping")
store_app = Flask("store")
quickstart_app = Flask("quickstart")


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


@quickstart_app.post("/webhooks/stripe")
def quickstart() -> tuple[Response, int] | Response:
    secret = os.environ["STRIPE_WEBHOOK_SECRET"].split(",")[0]
    try:
        event = stripe.Webhook.construct_event(
            request.data, request.headers.get("Stripe-Signature"), secret
        )
    except ValueError:
        return jsonify(error="invalid payload"), 400
    except stripe.SignatureVerificationError:
        return jsonify(error="invalid signature"), 400
    store.set(f"stripe:event:{event['id']}", request.data)
    return jsonify(success=True)
