"""Soak: the whole service under traffic while random faults are injected, then the checker.

    python scripts/soak.py --duration 600 --json var/soak.json

Starts its own redis-server (shipped config, append-only), gunicorn (2 workers), 2 RQ
workers and the sweeper on free loopback ports, restarts whatever dies, and injects:
SIGKILL of a gunicorn worker, of an RQ worker, of the sweeper and of redis-server
(restarted from its append-only file); SIGSTOP of an RQ worker past its lease; the
workers' own fault points (FAULTPOINT, at random); and one downstream outage (every call
answered like a 503 for --outage-seconds from a quarter of the run, then back), which the
shared circuit breaker rides out. ``--postgres``: the PostgreSQL action into a PostgreSQL
server of its own (tests/support/postgres.py), whose postmaster is killed (kill -9) a
quarter of the way in, instead of the outage, and started again; effects are then counted
in the user's own table. The client behaves like Stripe: every
delivery not answered 2xx is sent again later. Payments are refunded and disputed too (full,
partial, two partials, disputes lost and won: tests/support/soak_refunds.py), reversed by
REVERSAL_ACTION into the same order system behind the same switch (not with --postgres).
Exit 0 when nothing acknowledged is lost, no payment has two effects, every paid payment is
fulfilled or surfaced as interrupted (or refunded before it), every payment taken back is
reversed once and no reversal or call is made for one refunded before its fulfilment.
"""

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from redis import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ledger import keys
from ledger.downstream import read_downstream
from ledger.stored import decode_hash
from ledgerctl.reversal_check import ledger_marks
from tests.support.postgres import ORDER_SQL, PostgresServer, make_shop, orders_per_payment
from tests.support.processes import Gunicorn, RedisServer, RqWorker, Sweeper, children, service_env
from tests.support.soak_client import Client, settle, traffic
from tests.support.soak_refunds import held_reasons, summary

WORKER_FAULTS = "after_lease,before_action,after_action,during_record"
FAST = {
    "LEASE_SECONDS": "3",
    "FULFILMENT_TIMEOUT": "1",
    "SWEEP_INTERVAL": "0.5",
    "QUEUED_GRACE_SECONDS": "2",
    "BREAKER_COOLDOWN_SECONDS": "2",
}


class Service:
    """The processes under test, each restarted by ``heal`` when it has died."""

    def __init__(self, workdir: Path, secret: str, postgres: bool = False) -> None:
        self.workdir = workdir
        self.down_switch = workdir / "downstream-is-down"
        self.redis = RedisServer(workdir / "redis").start()
        self.database = PostgresServer().start() if postgres else None
        self.shop_url = make_shop(self.database.database("shop")) if self.database else ""
        action = {
            "FULFILMENT_ACTION": "tests.support.switched_downstream:fulfil",
            "REVERSAL_ACTION": "tests.support.switched_downstream:reverse",
            "SWITCHED_DOWNSTREAM_PATH": str(workdir / "downstream.sqlite3"),
            "SWITCHED_DOWNSTREAM_DOWN": str(self.down_switch),
        }
        if self.shop_url:
            action = {"FULFILMENT_ACTION": self.shop_url, "FULFILMENT_SQL": ORDER_SQL}
        self.env = service_env(
            self.redis.url,
            {
                **FAST,
                "STRIPE_WEBHOOK_SECRET": secret,
                "OPS_TOKEN": "soak",
                "STRIPE_MODE": "test",  # the generated events are test-mode payloads
                **action,
            },
        )
        self.worker_env = {**self.env, "FAULTPOINT": WORKER_FAULTS, "FAULT_PROBABILITY": "0.01"}
        self.web = Gunicorn(self.env, workers=2, log=workdir / "web.log").start()
        self.workers = [
            RqWorker(self.worker_env, log=workdir / "worker.log").start() for _ in range(2)
        ]
        self.sweeper = Sweeper(self.env, log=workdir / "sweeper.log").start()
        self.lock = threading.Lock()
        self.self_inflicted = 0

    def heal(self) -> None:
        with self.lock:
            if self.redis.proc is not None and self.redis.proc.poll() is not None:
                self.redis = RedisServer(self.workdir / "redis", self.redis.port).start()
            if self.database is not None and self.database.proc is None:  # killed
                self.database.start()
            for i, worker in enumerate(self.workers):
                if worker.proc is not None and worker.proc.poll() is not None:
                    if worker.proc.returncode == -signal.SIGKILL and not getattr(
                        worker, "killed", False
                    ):
                        self.self_inflicted += 1
                    self.workers[i] = RqWorker(
                        self.worker_env, log=self.workdir / "worker.log"
                    ).start()
            if self.sweeper.proc is not None and self.sweeper.proc.poll() is not None:
                self.sweeper = Sweeper(self.env, log=self.workdir / "sweeper.log").start()

    def downstream_outage(self, seconds: float) -> str:
        """The downstream is down for ``seconds`` (from now), then back; with the PostgreSQL
        action, its postmaster killed (heal starts it again)."""
        if self.database is not None:
            with self.lock:
                self.database.kill()
            return "postmaster_kill"
        self.down_switch.touch()
        threading.Timer(seconds, self.down_switch.unlink, kwargs={"missing_ok": True}).start()
        return "downstream_outage"

    @property
    def reversals_db(self) -> str | None:
        """The SQLite file of the reversals, when REVERSAL_ACTION is set."""
        return None if self.shop_url else str(self.workdir / "downstream.sqlite3")

    def effects(self) -> tuple[dict[str, int], int | None]:
        """Effects per payment, from the downstream's own record, and its calls if it
        counts them (the PostgreSQL action's effects are the user's order rows)."""
        if self.shop_url:
            return orders_per_payment(self.shop_url), None
        down = read_downstream(str(self.workdir / "downstream.sqlite3"))["payments"]
        return {pk: row["effects"] for pk, row in down.items()}, sum(
            row["calls"] for row in down.values()
        )

    def stop(self) -> None:
        self.down_switch.unlink(missing_ok=True)
        self.sweeper.stop()
        for worker in self.workers:
            worker.stop()
        self.web.stop()
        self.redis.stop()
        if self.database is not None:
            self.database.remove()


def inject(service: Service, rng: random.Random) -> str:
    """One random fault; returns its name."""
    kind = rng.choice(
        ["kill_web_worker", "kill_rq_worker", "pause_rq_worker", "kill_redis", "kill_sweeper"]
    )
    with service.lock:
        if kind == "kill_web_worker" and service.web.proc is not None:
            pids = children(service.web.proc.pid)
            if pids:
                os.kill(rng.choice(pids), signal.SIGKILL)
        elif kind in ("kill_rq_worker", "pause_rq_worker"):
            worker = rng.choice(service.workers)
            if worker.proc is None or worker.proc.poll() is not None:
                return kind
            if kind == "kill_rq_worker":
                worker.killed = True  # type: ignore[attr-defined]
                worker.proc.send_signal(signal.SIGKILL)
            else:
                worker.proc.send_signal(signal.SIGSTOP)
                threading.Timer(
                    4.0, lambda p=worker.proc: p.poll() is None and p.send_signal(signal.SIGCONT)
                ).start()
        elif kind == "kill_redis":
            service.redis.kill()
        elif service.sweeper.proc is not None:
            service.sweeper.proc.send_signal(signal.SIGKILL)
    return kind


def keep_healing(service: Service, done: threading.Event) -> None:
    while not done.wait(0.5):
        service.heal()


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    secret = f"whsec_soak_{rng.getrandbits(128):032x}"
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="webhook-soak-"))
    service = Service(workdir, secret, args.postgres)
    client = Client(f"{service.web.url}/webhooks/stripe", secret)
    faults: Counter[str] = Counter()
    began = time.monotonic()
    until = began + args.duration
    sender = threading.Thread(target=traffic, args=(client, rng, until, args))
    sender.start()
    try:
        next_fault = began + args.fault_interval
        outage_at = began + args.duration / 4 if args.outage_seconds else float("inf")
        while sender.is_alive():
            time.sleep(0.2)
            service.heal()
            if time.monotonic() >= outage_at:
                outage = min(args.outage_seconds, until - time.monotonic())
                faults[service.downstream_outage(outage)] += 1
                outage_at = float("inf")
            if time.monotonic() >= next_fault and time.monotonic() < until:
                faults[inject(service, rng)] += 1
                next_fault = time.monotonic() + rng.uniform(0.5, 1.5) * args.fault_interval
        sender.join()
        for _ in range(20):  # let restarted processes come back before settling
            service.heal()
            time.sleep(0.25)
        healed = threading.Event()
        threading.Thread(target=keep_healing, args=(service, healed), daemon=True).start()
        states = settle(client, service.redis.url, args.settle)
        healed.set()
        redis = Redis.from_url(service.redis.url)
        pipe = redis.pipeline(transaction=False)
        event_ids = sorted(client.acked)
        for event_id in event_ids:
            pipe.hget(keys.event(event_id), "n")
        recorded = {e: int(n or 0) for e, n in zip(event_ids, pipe.execute(), strict=True)}
        effects, calls = service.effects()
        marks = ledger_marks(redis, sorted(states))
        held = held_reasons(redis, states)
        found, undone = client.refunds.check(
            client.acked, recorded, client.paid, effects, states, marks, service.reversals_db
        )
        breaker = decode_hash(redis.hgetall(keys.BREAKER))
        stats = decode_hash(redis.hgetall(keys.STATS))
        refunded = int(stats.get("attempts_refunded", 0))
    finally:
        service.heal()
        faults["self_inflicted_worker_kill"] += service.self_inflicted
        service.stop()
    return {
        "duration_s": round(time.monotonic() - began, 1),
        "seed": args.seed,
        "deliveries_sent": client.sent,
        "deliveries_acked": sum(client.acked.values()),
        "answers": dict(client.statuses),
        "payments": len(client.paid),
        "faults": dict(faults),
        "faults_total": sum(faults.values()),
        "downstream_calls": calls,
        "breaker": {
            "opens": int(breaker.get("opens", 0)),
            "probes": int(breaker.get("probes", 0)),
            "state": breaker.get("state", "closed"),
            "attempts_refunded": refunded,
        },
        "states": dict(Counter(states.values())),
        "held_reasons": held,
        # taken back after a call with no answer, settled by a built-in action (REVERSAL.md)
        "settlements": {k: int(stats.get(k, 0)) for k in SETTLEMENT_COUNTS},
        "findings": found.as_dict(),
        "reversals": summary(undone, client.refunds.kinds),
        "lost": len(found.lost),
        "duplicated": len(found.duplicated),
        "workdir": str(workdir),
    }


SETTLEMENT_COUNTS = ("settles_due", "settled_voided", "settled_applied")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--duration", type=float, default=60.0, help="seconds of traffic and faults")
    p.add_argument("--fault-interval", type=float, default=5.0, help="mean seconds between faults")
    p.add_argument("--batch", type=int, default=20, help="payments per traffic batch")
    p.add_argument(
        "--rate", type=float, default=6.0, help="payments per second (fulfilment must keep up)"
    )
    p.add_argument("--copies", type=int, default=3, help="up to this many copies per event")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument(
        "--settle", type=float, default=120.0, help="seconds allowed to settle afterwards"
    )
    p.add_argument(
        "--outage-seconds",
        type=float,
        default=30.0,
        help="the downstream is down this long from a quarter of the run (0: no outage)",
    )
    p.add_argument(
        "--postgres",
        action="store_true",
        help="the PostgreSQL action into a server of its own, its postmaster killed instead "
        "of the outage",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--workdir", help="where Redis, logs and the downstream live (default: a temp dir)"
    )
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)
    result = run(args)
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    sys.exit(0 if result["findings"]["ok"] and result["reversals"]["ok"] else 1)


if __name__ == "__main__":
    main()
