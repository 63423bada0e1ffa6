"""Read a pool file of pre-signed requests (format in bench/events.py); imports nothing heavy."""

from pathlib import Path


def read_pool(path: Path, limit: int | None = None) -> list[tuple[str, bytes]]:
    with open(path, "rb") as f:
        head = f.readline().split()
        assert head[0] == b"WLPOOL", path
        items = []
        count = int(head[1]) if limit is None else min(limit, int(head[1]))
        for _ in range(count):
            n_sig, n_body = (int(x) for x in f.readline().split())
            items.append((f.read(n_sig).decode(), f.read(n_body)))
    return items
