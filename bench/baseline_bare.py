"""Baseline A: the bare endpoint. Same gunicorn settings; reads the body, answers 200.

gunicorn -c gunicorn.conf.py bench.baseline_bare:app
"""

from flask import Flask, Response, request

app = Flask(__name__)


@app.post("/webhooks/stripe")
def stripe_webhook() -> Response:
    request.get_data()
    return Response(b'{"received": true}', status=200, mimetype="application/json")
