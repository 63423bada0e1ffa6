"""Baselines A' and A'': the bare endpoint plus one Redis round trip. No signature check, no
parse: the floors under any receiver that talks to Redis before answering.

    gunicorn -c gunicorn.conf.py bench.baseline_store:app        # + one SET of the body
    gunicorn -c gunicorn.conf.py bench.baseline_store:ping_app   # + one PING, nothing stored
"""

import os

import redis
from flask import Flask, Response, request

app = Flask(__name__)
ping_app = Flask(f"{__name__}.ping")
store = redis.Redis.from_url(os.environ["REDIS_URL"])  # connects lazily, after the fork
ANSWER = b'{"received": true}'


@app.post("/webhooks/stripe")
def stripe_webhook() -> Response:
    store.set(f"bench:body:{os.urandom(8).hex()}", request.get_data())
    return Response(ANSWER, status=200, mimetype="application/json")


@ping_app.post("/webhooks/stripe")
def stripe_webhook_ping() -> Response:
    request.get_data()
    store.ping()
    return Response(ANSWER, status=200, mimetype="application/json")
