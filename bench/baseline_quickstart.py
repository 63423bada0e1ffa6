"""Baseline B: a receiver written the way Stripe's quick-start guides do it.

``stripe.Webhook.construct_event`` (verify, then build a StripeObject tree), then one
plain Redis write of the payload. No ledger, no dedupe, no job.

    gunicorn -c gunicorn.conf.py bench.baseline_quickstart:app
"""

import os

import redis
import stripe
from flask import Flask, jsonify, request

app = Flask(__name__)
endpoint_secret = os.environ["STRIPE_WEBHOOK_SECRET"].split(",")[0]
store = redis.Redis.from_url(os.environ["REDIS_URL"])  # connects lazily, after the fork


@app.post("/webhooks/stripe")
def stripe_webhook():
    payload = request.data
    sig_header = request.headers.get("Stripe-Signature")
    try:
        event = stripe.Webhook.construct_event(payload, sig_header, endpoint_secret)
    except ValueError:
        return jsonify(error="invalid payload"), 400
    except stripe.SignatureVerificationError:
        return jsonify(error="invalid signature"), 400
    store.set(f"stripe:event:{event['id']}", payload)
    return jsonify(success=True)
