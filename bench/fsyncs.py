"""Count the fsyncs a redis-server makes (``fdatasync``/``fsync``, its AOF at ``appendfsync
always``) while a block runs, with ``strace -c`` attached to it. strace slows every system
call of the server, so a run counted this way is never a timed one.
"""

import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SYSCALLS = ("fdatasync", "fsync")


def available() -> bool:
    return shutil.which("strace") is not None


@contextmanager
def counting(pid: int) -> Iterator[dict[str, int]]:
    """Yields a dict that holds ``fsyncs`` once the block has ended."""
    found: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "strace.txt"
        argv = ["strace", "-f", "-c", "-e", f"trace={','.join(SYSCALLS)}", "-p", str(pid)]
        tracer = subprocess.Popen([*argv, "-o", str(out)], stderr=subprocess.PIPE)
        assert tracer.stderr is not None
        tracer.stderr.readline()  # "Process N attached": tracing from here on
        time.sleep(0.2)  # every thread of the server attached
        try:
            yield found
        finally:
            tracer.send_signal(signal.SIGINT)
            tracer.wait(30)
            found["fsyncs"] = calls(out.read_text())


def calls(summary: str) -> int:
    """Calls of SYSCALLS in an ``strace -c`` summary."""
    total = 0
    for line in summary.splitlines():
        fields = line.split()
        if fields and fields[-1] in SYSCALLS and re.fullmatch(r"\d+", fields[3]):
            total += int(fields[3])
    return total
