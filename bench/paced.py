"""Open-loop load generator: POST a pool's requests at a fixed rate to 127.0.0.1.

    python -m bench.paced --pool FILE --port N --rate R --duration S [--max-conns C]

Request i is due at t0 + i / rate; its latency is measured from when it was *due*, not
from when a connection was free, so a server that falls behind is charged for the
queueing it causes (no coordinated omission). Keep-alive connections are reused; a
server that answers ``Connection: close`` (gunicorn's sync worker) gets a new one.
Bounded: at most rate x duration requests, and it gives up 30 s after the last is due.
Prints one JSON line.
"""

import argparse
import asyncio
import json
import math
import sys
from collections import Counter
from pathlib import Path

from bench.poolfile import read_pool  # no heavy imports: its CPU is measured

HOST = "127.0.0.1"


def build(path: str, port: int, sig: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
        "Content-Type: application/json; charset=utf-8\r\n"
        "User-Agent: Stripe/1.0 (+https://stripe.com/docs/webhooks)\r\n"
        "Accept: */*; q=0.5, application/xml\r\nCache-Control: no-cache\r\n"
        f"Stripe-Signature: {sig}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, raw: bytes):
    writer.write(raw)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length, close = 0, False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
    if length:
        await reader.readexactly(length)
    return status, close


async def run(args: argparse.Namespace) -> dict:
    total = min(int(args.rate * args.duration), args.max_requests)
    pool = read_pool(Path(args.pool), limit=total)
    requests = [build(args.path, args.port, sig, body) for sig, body in pool]
    loop = asyncio.get_running_loop()
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    gate = asyncio.Semaphore(args.max_conns)
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    errors: Counter[str] = Counter()

    async def one(i: int, due: float) -> None:
        raw = requests[i % len(requests)]
        async with gate:
            for attempt in range(2):
                reused = bool(idle)
                conn = idle.pop() if idle else await asyncio.open_connection(HOST, args.port)
                try:
                    status, close = await exchange(*conn, raw)
                except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                    conn[1].close()
                    if reused and attempt == 0:
                        continue  # a kept-alive connection the server had closed
                    errors[type(exc).__name__] += 1
                    return
                latencies.append(loop.time() - due)
                statuses[status] += 1
                if close:
                    conn[1].close()
                else:
                    idle.append(conn)
                return

    tasks = []
    t0 = loop.time() + 0.05
    i = 0
    while i < total:
        now = loop.time()
        due = t0 + i / args.rate
        if due > now:
            await asyncio.sleep(due - now)
            continue
        while i < total and t0 + i / args.rate <= now:
            tasks.append(asyncio.ensure_future(one(i, t0 + i / args.rate)))
            i += 1
    sent_for = loop.time() - t0
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=30)
        for task in pending:
            task.cancel()
        errors["unfinished"] += len(pending)
    for _, writer in idle:
        writer.close()
    latencies.sort()

    def q(p: float) -> float:
        """Nearest rank, as bench.stats.pct (not imported here: this process's CPU counts)."""
        if not latencies:
            return float("nan")
        n = len(latencies)
        return latencies[max(0, min(n - 1, math.ceil(p * n / 100) - 1))] * 1000

    return {
        "target_rate": args.rate,
        "sent": total,
        "completed": len(latencies),
        "achieved_rate": total / sent_for if sent_for > 0 else 0.0,
        "statuses": {str(k): v for k, v in statuses.items()},
        "errors": dict(errors),
        "p50_ms": q(50),
        "p90_ms": q(90),
        "p99_ms": q(99),
        "max_ms": latencies[-1] * 1000 if latencies else float("nan"),
        "mean_ms": sum(latencies) / len(latencies) * 1000 if latencies else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pool", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--path", default="/webhooks/stripe")
    p.add_argument("--rate", type=float, required=True, help="requests per second")
    p.add_argument("--duration", type=float, required=True, help="seconds of sending")
    p.add_argument("--max-conns", type=int, default=64)
    p.add_argument("--max-requests", type=int, default=200_000)
    args = p.parse_args(argv)
    if args.duration > 120 or args.rate <= 0:
        p.error("--duration is capped at 120 s and --rate must be positive")
    print(json.dumps(asyncio.run(run(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
