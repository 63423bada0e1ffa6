"""ledgerctl/stack_ready.py: what --stripe-cli's listeners wait for before they start, the
stack's own /readyz, bounded: another server on the port does not count, and the wait ends
with one line saying why after its timeout."""

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ledgerctl import stack_ready
from tests.support.processes import free_port


@pytest.fixture
def readyz() -> Iterator[tuple[str, dict[str, int]]]:
    """A /readyz answering the pid in the dict it yields."""
    answered = {"pid": os.getpid()}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = json.dumps({"status": "ready", **answered}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", answered
    server.shutdown()
    server.server_close()


def test_ready_only_when_a_process_of_this_stack_answers(readyz) -> None:
    base, answered = readyz
    assert stack_ready.not_ready(base, os.getpid()) == ""
    answered["pid"] = 1
    assert "not a process of this stack" in stack_ready.not_ready(base, os.getpid())
    assert stack_ready.not_ready(f"http://127.0.0.1:{free_port()}", os.getpid())


def test_the_wait_returns_once_ready_and_gives_up_on_time(readyz, capsys) -> None:
    base, answered = readyz
    stack_ready.main([base, "--stack-pid", str(os.getpid())])
    assert f"{base}/readyz answered after" in capsys.readouterr().out
    answered["pid"] = 1
    with pytest.raises(SystemExit) as stopped:
        stack_ready.main([base, "--stack-pid", str(os.getpid()), "--timeout", "0.3"])
    assert stopped.value.code == 1
    assert "gave up after 0.3 s" in capsys.readouterr().out.splitlines()[-1]
