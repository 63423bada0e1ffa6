"""Where the time goes: in-process timings of the receiver's steps, plus py-spy profiles of
the receiver and of a fulfilment worker (bench/spy.py).

Receiver: the shipped stack (gunicorn with the shipped gevent worker, 2 workers, Redis with
the shipped config) at peak load from wrk, both gunicorn workers sampled by py-spy (on-CPU
samples only). Worker: one ``rq worker -w rq.worker.SimpleWorker`` draining real fulfilment jobs.
Each sample is put in one bucket by the innermost frame that matches a rule in
bench/spy.py, so the buckets add up to 100 % of the process's CPU samples; the share times
the measured CPU per request gives microseconds per request. Raw collapsed stacks are kept
in var/bench/ for flame graphs.

    .venv/bin/python -m bench.profile [--quick]
"""

import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from bench.common import (
    SECRET,
    RedisServer,
    Stack,
    Workdir,
    log,
    section_main,
    service_env,
)
from bench.events import EventFactory
from bench.spy import have_pyspy, receiver, worker

Pair = tuple[bytes, str]


def median_us(fn: Callable[[Any], object], items: Iterable[Any]) -> float:
    """Median wall time of ``fn(item)`` over ``items``, in microseconds."""
    times = []
    for item in items:
        t = time.perf_counter()
        fn(item)
        times.append((time.perf_counter() - t) * 1e6)
    return round(statistics.median(times), 1)


def steps(wd: Workdir, n: int) -> dict[str, Any]:
    """Median wall time of each step of the receiver's path, in this process, one call at a
    time over realistic events (Redis with the shipped config for the ledger write)."""
    import orjson
    import stripe

    from bench.events import sign_all
    from bench.recording import ledger_for

    bodies = EventFactory(seed=13).events(n)
    pairs = list(zip(bodies, sign_all(bodies, SECRET), strict=True))
    with Stack() as st:
        redis = st.start(RedisServer(wd.sub("redis-steps")))
        ledger = ledger_for(service_env(redis.url, wd.path))
        out: dict[str, Any] = round_trip_cpu(ledger.redis)
        events = [orjson.loads(b) for b in bodies]
        out |= _parse_steps(pairs, events, ledger.settings)
        out |= _ledger_steps(ledger, bodies, events)
        out["stripe.Webhook.construct_event (the quick-start's parse, for comparison)"] = median_us(
            lambda p: stripe.Webhook.construct_event(p[0], p[1], SECRET), pairs
        )
        ledger.redis.flushdb()
        out |= _view_step(redis.url, pairs)
    return out | _dispatch_step(pairs)


def _parse_steps(pairs: list[Pair], events: list[Any], settings: Any) -> dict[str, float]:
    """Signature check, JSON parse, classify, hashing and compression of each body."""
    import hashlib

    import orjson

    from ledger.event_shape import check_shape
    from ledger.events import classify
    from ledger.payloads import LEVEL, compress_payload
    from webhook.verify import verify

    bodies = [b for b, _ in pairs]
    return {
        "decode UTF-8 + verify signature (webhook.verify)": median_us(
            lambda p: verify(p[0].decode(), p[1], [SECRET], 300), pairs
        ),
        "orjson.loads + check_shape": median_us(lambda b: check_shape(orjson.loads(b)), bodies),
        "classify": median_us(lambda e: classify(e, settings.policy), events),
        "sha256 of the body": median_us(lambda b: hashlib.sha256(b).hexdigest(), bodies),
        f"compress_payload (Zstandard level {LEVEL}, dictionary)": median_us(
            compress_payload, bodies
        ),
    }


def _ledger_steps(ledger: Any, bodies: list[bytes], events: list[Any]) -> dict[str, float]:
    """Building the RQ job, the whole ledger write and its FCALL round trip alone."""
    from bench.recording import delivery
    from ledger.events import classify

    out: dict[str, float] = {}
    paid = [classify(e, ledger.settings.policy) for e in events]
    pks = [c.payment_key for c in paid if c.paid and c.payment_key]
    out["Jobs.prepare (RQ's job filled in; paid events only)"] = median_us(ledger.jobs.prepare, pks)
    out["share of events that are paid"] = round(len(pks) / len(events), 2)
    ds = [delivery(ledger, b) for b in bodies]
    out["Ledger.record_delivery, whole (args + FCALL, appendfsync always)"] = median_us(
        ledger.record_delivery, ds
    )
    ledger.redis.flushdb()
    calls = [_script_call(ledger, delivery(ledger, b)) for b in bodies]
    out["  of which the FCALL round trip alone"] = median_us(
        lambda ka: ledger.record_script.run(*ka), calls
    )
    return out


def _view_step(redis_url: str, pairs: list[Pair]) -> dict[str, float]:
    """The whole view through Flask's test client, delivery log lines sent to /dev/null."""
    from webhook import create_app

    app = create_app({"REDIS_URL": redis_url, "STRIPE_WEBHOOK_SECRET": SECRET})
    devnull = open(os.devnull, "w")
    for handler in logging.getLogger("webhook").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(devnull)
    client = app.test_client()
    headers = {"Content-Type": "application/json", "User-Agent": "Stripe/1.0"}

    def post(p: Pair) -> object:
        return client.post(
            "/webhooks/stripe", data=p[0], headers={**headers, "Stripe-Signature": p[1]}
        )

    return {"whole view through Flask's test client (no gunicorn)": median_us(post, pairs)}


def _dispatch_step(pairs: list[Pair]) -> dict[str, float]:
    """What Flask itself costs a request: the bare endpoint (a Flask app) called through WSGI
    against a plain WSGI function that reads the body and answers the same bytes."""
    import io

    from bench.baselines import bare_app as bare

    def environ(p: Pair) -> dict[str, Any]:
        return {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/webhooks/stripe",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(p[0]),
            "wsgi.errors": sys.stderr,
            "CONTENT_LENGTH": str(len(p[0])),
            "CONTENT_TYPE": "application/json",
            "HTTP_STRIPE_SIGNATURE": p[1],
        }

    def plain(env: dict[str, Any], start_response: Callable[..., object]) -> list[bytes]:
        env["wsgi.input"].read(int(env["CONTENT_LENGTH"]))
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"received": true}']

    def call(app: Callable[..., Iterable[bytes]]) -> Callable[[Pair], object]:
        return lambda p: b"".join(app(environ(p), lambda *_: None))

    return {
        "bare endpoint through Flask (WSGI call, no server)": median_us(call(bare), pairs),
        "the same as a plain WSGI function": median_us(call(plain), pairs),
    }


def round_trip_cpu(client, n: int = 5000) -> dict[str, float]:
    """CPU of one bare Redis round trip, this process (user + sys) and Redis's own: what any
    receiver that writes to Redis pays before doing anything else."""

    def redis_cpu() -> float:
        info = client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    body = b"x" * 1200
    out = {}
    for name, call in (
        ("PING", client.ping),
        ("SET of 1.2 KB (appendfsync always)", lambda: client.set("bench:rtt", body)),
    ):
        cpu, server = time.process_time(), redis_cpu()
        for _ in range(n):
            call()
        out[f"one Redis round trip, {name}: client CPU"] = round(
            (time.process_time() - cpu) / n * 1e6, 1
        )
        out[f"one Redis round trip, {name}: Redis CPU"] = round((redis_cpu() - server) / n * 1e6, 1)
    client.delete("bench:rtt")
    return out


def _script_call(ledger, d) -> tuple[Any, Any]:
    """The keys and arguments record_delivery would send for ``d`` (nothing is sent)."""
    run = ledger.record_script.run
    captured: dict[str, Any] = {}

    def capture(keys, args):
        captured["k"], captured["a"] = keys, args
        return [1, 0, 0, 0, "pending", ""]

    ledger.record_script.run = capture
    try:
        ledger.record_delivery(d)
    finally:
        ledger.record_script.run = run
    return captured["k"], captured["a"]


def run(quick: bool = False) -> dict[str, Any]:
    wd = Workdir.make("profile")
    result: dict[str, Any] = {"section": "profile", "quick": quick}
    try:
        log("profile: step timings of the receiver path, in-process")
        result["steps_us"] = steps(wd, 300 if quick else 1000)
        if not have_pyspy():
            result["skipped"] = "py-spy is not installed (scripts/bootstrap.sh --group bench)"
            return result
        log("profile: receiver under wrk, py-spy on both gunicorn workers")
        result["receiver"] = receiver(wd, 4.0 if quick else 7.0)
        log("profile: one SimpleWorker draining fulfilment jobs")
        result["worker"] = worker(wd, 150 if quick else 400)
    finally:
        wd.remove()
    return result


if __name__ == "__main__":
    sys.exit(section_main("profile", run, sys.argv[1:]))
