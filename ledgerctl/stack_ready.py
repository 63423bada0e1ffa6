"""Whether this stack's own web server answers /readyz: what ``scripts/run.sh`` polls for its
"ready" line, and, as ``python -m ledgerctl.stack_ready``, the wait ``--stripe-cli`` puts
before each ``stripe listen``. The CLI does not retry an event its forward finds refused, so
a listener started before gunicorn listens loses what Stripe sends it in those seconds.

An answer counts only from a process of this stack (its pid descends from the launcher's),
not from another server on the same port.
"""

import argparse
import json
import shlex
import sys
import time
import urllib.error
import urllib.request

from ledgerctl import local_guard

POLL_S = 0.25
WAIT_S = 120.0
"""The longest ``main`` waits: the web gives up on Redis after 30 s (wait-redis), and a web
that never answers stops the stack anyway."""


def not_ready(base: str, stack_pid: int) -> str:
    """Why ``base``/readyz does not yet show this stack's server ready; "" once it does."""
    try:
        with urllib.request.urlopen(f"{base}/readyz", timeout=2) as answer:
            pid = int(json.load(answer).get("pid", 0))
    except (urllib.error.URLError, OSError, ValueError, AttributeError) as exc:
        return str(exc)
    if local_guard.descends_from(pid, stack_pid):
        return ""
    return f"/readyz answered by pid {pid}, not a process of this stack"


def wait_command(base: str, stack_pid: int) -> str:
    """The shell command that returns once ``base`` answers as this stack's (``main``)."""
    argv = [sys.executable, "-u", "-m", __name__, base, "--stack-pid", str(stack_pid)]
    return shlex.join(argv)


def main(argv: list[str] | None = None) -> None:
    """Return (exit 0) once BASE/readyz answers 200 from a descendant of --stack-pid; exit 1
    after --timeout seconds without, saying why."""
    parser = argparse.ArgumentParser(prog="python -m ledgerctl.stack_ready")
    parser.add_argument("base", help="the web server's base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--stack-pid", type=int, required=True, help="the launcher's pid")
    parser.add_argument("--timeout", type=float, default=WAIT_S, help="seconds to wait")
    args = parser.parse_args(argv)
    print(f"waiting for {args.base}/readyz (up to {args.timeout:g} s)", flush=True)
    started = time.monotonic()
    while why := not_ready(args.base, args.stack_pid):
        if time.monotonic() - started > args.timeout:
            print(f"gave up after {args.timeout:g} s: {args.base}/readyz: {why}", flush=True)
            sys.exit(1)
        time.sleep(POLL_S)
    print(f"{args.base}/readyz answered after {time.monotonic() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
