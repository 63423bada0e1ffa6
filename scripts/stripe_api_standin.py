#!/usr/bin/env python3
"""A stand-in of Stripe's API on 127.0.0.1, for Checkout line items without a Stripe account:

    scripts/stripe_api_standin.py --port 12111

It prints the STRIPE_API_BASE and STRIPE_API_KEY to give the stack (with
CHECKOUT_LINE_ITEMS=true) and serves until Ctrl-C (or SIGTERM). The replay script's
``--serve-sessions http://127.0.0.1:12111`` gives it each generated Checkout Session and its
line items, which the workers then read as from Stripe; give it one yourself with
``PUT /standin/checkout/sessions/{id}`` and the JSON body ``{"session": {...}, "line_items":
[...]}`` (the session and its line items as Stripe's API shows them). It is the suite's stand-in
(tests/support/stripe_api.py), so it runs from a checkout, with the checkout's .venv (re-run
with it from any other python3, as scripts/replay_events.py is). Never a real Stripe.
"""

import argparse
import signal
import sys
import threading
from pathlib import Path

from checkout_venv import VENV, rerun_with_venv

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support of this checkout

try:
    from tests.support.stripe_api import API_KEY, EventsApi
except ImportError:
    rerun_with_venv(__file__, f"{VENV}/bin/python is missing: run scripts/bootstrap.sh first")

DEFAULT_PORT = 12111


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="on 127.0.0.1 (12111)")
    parser.add_argument("--key", default=API_KEY, help="the API key it accepts (a test key)")
    args = parser.parse_args()
    try:
        api = EventsApi(args.key, args.port).start()
    except OSError as exc:
        sys.exit(f"stripe_api_standin: cannot listen on 127.0.0.1:{args.port}: {exc.strerror}")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(f"Stripe API stand-in on {api.url} (Ctrl-C stops it); give the stack:")
    print(f"STRIPE_API_BASE={api.url} STRIPE_API_KEY={args.key} CHECKOUT_LINE_ITEMS=true")
    print(f"and the replay script: --serve-sessions {api.url}", flush=True)
    stop.wait()
    api.stop()


if __name__ == "__main__":
    main()
