"""``webhook-ledger prove-action``'s fault matrix: the configured action run by the service's
own workers and sweeper on a scratch Redis, one generated payment per fault, each counted
(calls, effects, final state) when it has settled.

The faults, in order: every paid type delivered three times over and four times at once
(two workers running); then, one worker at a time, the worker killed before the call
(fault point ``before_action``), inside it (ledgerctl/prove_worker.py, at three depths of
the call) and after it (``after_action``); a worker paused (SIGSTOP) inside its call until
its lease has expired and the payment has moved on, then resumed (SIGCONT); the call
applied but its answer held past FULFILMENT_TIMEOUT; the call sent again with the same
idempotency key once it returned (replay-safe actions only: the service resends nothing
else).
"""

import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

from redis import Redis

from ledger import keys
from ledger.deliveries import Delivery, Ledger, new_request_id
from ledger.events import classify
from ledger.stored import text
from ledgerctl import samples
from ledgerctl.prove_probe import NOT_RUN, Probe, Row, verdict
from ledgerctl.prove_purchase import marked, purchase_fields_of
from ledgerctl.scratch import Processes

TEMPLATES = {
    "charge.succeeded": "charge.succeeded",
    "charge.captured": "charge.succeeded",
    "payment_intent.succeeded": "payment_intent.succeeded",
    "checkout.session.completed": "checkout.session.completed",
    "checkout.session.async_payment_succeeded": "checkout.session.completed",
    "invoice.paid": "invoice.paid",
}
"""The shipped sample whose object each paid type carries."""
SETTLED = ("fulfilled", "interrupted", "failed", "held")
DURING = (4, 2, 4 / 3)
"""The kills inside the call: at a quarter, half and three quarters of its depth."""


class RowTimeout(Exception):
    """A payment did not settle within the row's time."""


@dataclass
class Prover:
    ledger: Ledger
    procs: Processes
    env: dict[str, str]
    folder: Path
    probe: Probe
    replay_safe: bool
    row_seconds: float
    rng: random.Random
    deadline: float
    """time.monotonic() after which no fault starts (--max-seconds)."""

    @property
    def redis(self) -> Redis:
        return self.ledger.redis

    def rows(self) -> Iterator[Row]:
        """Every fault's row, in order (each yielded as soon as it is known)."""
        self.procs.sweeper(self.env)
        steady = [self.procs.worker(self.env) for _ in range(2)]
        for paid_type in self.ledger.settings.PAID_EVENT_TYPES:
            yield self.delivered(f"duplicate {paid_type} (3 in turn)", paid_type, 3, False)
            yield self.delivered(f"concurrent {paid_type} (4 at once)", paid_type, 4, True)
        self.procs.stop(steady)
        depth = max(self.depths().values(), default=0)
        yield self.faulted("killed before the call", {"FAULTPOINT": "before_action"})
        for part in DURING if depth else ():
            at = max(1, round(depth / part))
            name = f"killed during the call (at {at} of {depth} function calls)"
            yield self.faulted(name, {"PROVE_STOP_AT": str(at)})
        yield self.faulted("killed after the call", {"FAULTPOINT": "after_action"})
        at = max(1, depth // 2)
        yield self.paused(f"paused past its lease (at {at} of {depth} function calls)", at)
        timeout = self.ledger.settings.FULFILMENT_TIMEOUT
        name = f"downstream answered after FULFILMENT_TIMEOUT ({timeout:g} s), having applied"
        yield self.faulted(name, {"PROVE_SLOW": "1"}, rescue=False)
        name = "resent with the same idempotency key"
        if not self.replay_safe:
            why = "not replay-safe: the service resends none that may have applied"
            yield Row(name, "", 0, 0, "", "skipped", why)
        else:
            yield self.faulted(name, {"PROVE_RESEND": "1"}, rescue=False)

    def delivered(self, name: str, paid_type: str, copies: int, at_once: bool) -> Row:
        if time.monotonic() > self.deadline:
            return late(name)
        event = self.event(paid_type)
        if event is None:
            return Row(name, "", 0, 0, "", "skipped", "no sample event of this type")
        send_copies(lambda: self.record(event), copies, at_once)
        return self.settled_row(name, self.key_of(event))

    def faulted(self, name: str, fault: dict[str, str], rescue: bool = True) -> Row:
        """One worker with ``fault`` takes the payment; once it has died (``rescue``),
        another worker runs whatever the ledger hands out next."""
        if time.monotonic() > self.deadline:
            return late(name)
        event = self.event("payment_intent.succeeded")
        assert event is not None
        doomed = self.procs.worker({**self.env, **fault})
        self.record(event)
        pk = self.key_of(event)
        helpers: list[Popen[bytes]] = []
        try:
            if rescue:
                self.wait(lambda: doomed.poll() is not None or self.settled(pk), "the fault")
                helpers.append(self.procs.worker(self.env))
            return self.settled_row(name, pk, doomed.poll() is None and rescue)
        finally:
            self.procs.stop([doomed, *helpers])

    def paused(self, name: str, at: int) -> Row:
        """SIGSTOP inside the call; SIGCONT once the payment has left that attempt."""
        if time.monotonic() > self.deadline:
            return late(name)
        event = self.event("payment_intent.succeeded")
        assert event is not None
        doomed = self.procs.worker({**self.env, "PROVE_STOP_AT": str(at), "PROVE_STOP": "pause"})
        self.record(event)
        pk = self.key_of(event)
        helper = None
        try:
            self.wait(lambda: stopped(doomed.pid) or self.settled(pk), "the worker paused")
            token = self.field(pk, "token")
            helper = self.procs.worker(self.env)
            self.wait(lambda: self.field(pk, "token") != token or self.settled(pk), "its lease")
            doomed.send_signal(signal.SIGCONT)
            return self.settled_row(name, pk)
        finally:
            self.procs.stop([doomed, *([helper] if helper else [])])

    def settled_row(self, name: str, pk: str, not_reached: bool = False) -> Row:
        try:
            self.wait(lambda: self.settled(pk) and self.quiet(pk), f"{pk} to settle")
            sweeps = self.sweeps() + 2  # further sweeps must change nothing
            self.wait(lambda: self.sweeps() >= sweeps, "two more sweeps")
            self.wait(lambda: self.quiet(pk), f"every call for {pk} to return")
        except RowTimeout as exc:
            state = self.field(pk, "state")
            return Row(name, pk, self.calls()[pk], self.probe(pk), state, "unsettled", str(exc))
        state = self.field(pk, "state")
        note = "the fault was not reached: the call is shallower" if not_reached else ""
        if state != "fulfilled" and not note:  # why: a refused statement, a hold
            note = self.field(pk, "last_error") or self.field(pk, "hold_reason")
        effects = self.probe(pk)
        return Row(name, pk, self.calls()[pk], effects, state, verdict(effects, state), note)

    def event(self, paid_type: str) -> dict[str, object] | None:
        template = TEMPLATES.get(paid_type)
        if template is None:
            return None
        event = samples.event_of_type(self.rng, template)
        event["type"], event["created"] = paid_type, int(time.time())
        marked(event)
        c = classify(event, self.ledger.settings.policy)
        return event if c.paid and not c.hold else None

    def record(self, event: dict[str, object]) -> None:
        body = samples.encode(event)
        c = classify(event, self.ledger.settings.policy)
        fields = purchase_fields_of(event) if c.paid else None
        delivery = Delivery(event, body, c, "prove", "prove", new_request_id(), fields)
        self.ledger.record_delivery(delivery)

    def key_of(self, event: dict[str, object]) -> str:
        return classify(event, self.ledger.settings.policy).payment_key or ""

    def field(self, pk: str, name: str) -> str:
        value = self.redis.hget(keys.payment(pk), name)
        return text(value) if value is not None else ""

    def settled(self, pk: str, states: tuple[str, ...] = SETTLED) -> bool:
        due = self.redis.zscore(keys.DUE, pk) is not None
        return self.field(pk, "state") in states and not due

    def sweeps(self) -> int:
        return int(self.redis.hget(keys.SWEEPER, "sweeps") or 0)

    def calls(self, log: str = "calls") -> Counter[str]:
        """Calls per payment of the action whose calls ``log`` names (REVERSAL_ACTION's:
        ``reversal_calls``)."""
        return Counter(line.split()[0] for line in lines(self.folder / log))

    def depths(self, log: str = "counts") -> dict[str, int]:
        """How many function calls each payment's deepest returned call made."""
        found: dict[str, int] = {}
        for line in lines(self.folder / log):
            pk, _, seen = line.split()[:3]
            found[pk] = max(found.get(pk, 0), int(seen))
        return found

    def quiet(self, pk: str) -> bool:
        """No call for ``pk`` is still running, of either action: each started one returned
        or its process is gone."""
        for calls, counts in (("calls", "counts"), ("reversal_calls", "reversal_counts")):
            started = Counter(tuple(line.split()) for line in lines(self.folder / calls))
            ended = Counter(tuple(line.split()[:2]) for line in lines(self.folder / counts))
            if not all(
                ended[(key, pid)] >= n or not alive(int(pid))
                for (key, pid), n in started.items()
                if key == pk
            ):
                return False
        return True

    def wait(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.row_seconds
        while not done():
            if time.monotonic() > deadline:
                raise RowTimeout(f"gave up after {self.row_seconds:g} s waiting for {what}")
            time.sleep(0.05)


def late(name: str) -> Row:
    return Row(name, "", 0, 0, "", NOT_RUN, "--max-seconds reached before it")


def lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def alive(pid: int) -> bool:
    """Running or paused, not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def send_copies(send: Callable[[], None], copies: int, at_once: bool) -> None:
    """``send`` ``copies`` times: one after another, or each in its own thread at once."""
    if not at_once:
        for _ in range(copies):
            send()
        return
    threads = [threading.Thread(target=send) for _ in range(copies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
