"""``python -m examples.shop clients PORT`` (examples/shop/clients.py): which processes hold
a connection to the shop's PostgreSQL port, so examples/shop/run.sh never stops a server in
use. A descriptor closed while a process's descriptors are read must not hide the process."""

import socket
import subprocess
import sys

from examples.shop.clients import clients
from tests.support.processes import wait_until

HOLDER = """
import os, socket, sys
below = [os.open(os.devnull, os.O_RDONLY) for _ in range(4)]
held = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for fd in below:
    os.close(fd)
print("connected", flush=True)
while True:  # descriptors numbered below the connection's opened and closed all the time
    os.close(os.open(os.devnull, os.O_RDONLY))
"""


def test_a_process_holding_a_connection_is_found_while_its_other_descriptors_churn() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "connected\n"
        wait_until(lambda: holder.pid in dict(clients(port)), what="the holder found once")
        found = [holder.pid in dict(clients(port)) for _ in range(500)]
    finally:
        holder.kill()
        holder.communicate(timeout=10)
        listener.close()
    assert all(found), f"missed in {found.count(False)} of {len(found)} scans"
