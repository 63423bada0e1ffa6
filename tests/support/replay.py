"""Run scripts/replay_events.py as a user does (its own process) and read its JSON report;
and small local HTTP servers that misbehave, for what the script must not trust."""

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.constants import SECRET
from tests.support.processes import ROOT, serving_thread

SCRIPT = str(ROOT / "scripts" / "replay_events.py")
AGAINST_A_STAND_IN = ("--generate", "1", "--expect-once", "--settle-timeout", "1")
"""One payment's events, checked with --expect-once, against a server that is no ledger
(so a short wait for fulfilment: nothing will be fulfilled)."""


def replay(
    env: dict[str, str], url: str, *args: str, out: Path | None = None, expect: int = 0
) -> tuple[int, dict]:
    """Run the script; returns its exit status and its JSON report."""
    report = out or Path(env["TMP_REPORT"])
    proc = run_script(env, "--url", url, "--json", str(report), "--quiet", *args)
    assert proc.returncode == expect, proc.stderr
    return proc.returncode, json.loads(report.read_text())


def run_script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The script with ``args`` (``--secret`` the tests' own unless given)."""
    secret = [] if "--secret" in args else ["--secret", SECRET]
    return subprocess.run(
        [sys.executable, SCRIPT, *secret, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


Handle = Callable[[BaseHTTPRequestHandler], None]


@contextmanager
def local_server(handle: Handle) -> Iterator[str]:
    """A server on a free loopback port answering every POST with ``handle``; yields its
    base URL. Each request's body is read first, as a real endpoint would."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            handle(self)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    serving_thread(server).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
