"""The web worker patches the standard library for gevent, all but ``select``
(webhook/server.py ``Worker.patch``). Patching is for the whole process: each check runs in
a fresh interpreter."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import types
from gevent import monkey
from webhook.server import Worker

Worker.patch(types.SimpleNamespace(sockets=[]))
import select, socket, threading, time
from redis._parsers import hiredis

modules = ("socket", "time", "threading", "ssl", "select")
patched = [m for m in modules if monkey.is_module_patched(m)]
assert patched == ["socket", "time", "threading", "ssl"], patched
# What redis-py's readiness check before each command runs: the C library's poll.
assert hiredis.select.poll is monkey.get_original("select", "poll")
print("ok")
"""


def test_everything_is_patched_but_select() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
