"""A merchant's HTTP downstream for the benchmarks: answers every POST 200 after a fixed
delay (``--delay-ms``; 0: at once), a thread per connection, in a process of its own so its
CPU is not the harness's. ``HttpDownstream`` starts it on a free port.

    .venv/bin/python -m bench.downstream --port 8123 --delay-ms 100
"""

import argparse
import socket
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HttpDownstream:
    """``python -m bench.downstream`` on a free loopback port."""

    def __init__(self, delay_ms: float) -> None:
        self.delay_ms = delay_ms
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/fulfil"

    def start(self) -> "HttpDownstream":
        argv = [sys.executable, "-m", "bench.downstream", "--port", str(self.port)]
        self.proc = subprocess.Popen([*argv, "--delay-ms", str(self.delay_ms)])
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return self
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the bench downstream did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def serve(port: int, delay_s: float) -> None:
    class Answer(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if delay_s:
                time.sleep(delay_s)
            body = b'{"order": "ok"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 256  # the listen backlog: every worker thread may connect at once

    Server(("127.0.0.1", port), Answer).serve_forever()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--delay-ms", type=float, default=0.0)
    a = p.parse_args()
    serve(a.port, a.delay_ms / 1000)
