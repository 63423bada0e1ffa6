"""Baseline A': the bare endpoint plus one Redis write of the body. No signature check, no
parse: the floor of any receiver that stores what it is sent in Redis before answering.

    gunicorn -c gunicorn.conf.py bench.baseline_store:app
"""

import os

import redis
from flask import Flask, Response, request

app = Flask(__name__)
store = redis.Redis.from_url(os.environ["REDIS_URL"])  # connects lazily, after the fork


@app.post("/webhooks/stripe")
def stripe_webhook() -> Response:
    store.set(f"bench:body:{os.urandom(8).hex()}", request.get_data())
    return Response(b'{"received": true}', status=200, mimetype="application/json")
