"""``webhook-ledger prove-action``'s reversal rows (REVERSAL_ACTION set): a payment fulfilled by
the service's own workers, then taken back (ledgerctl/takebacks.py: a refund in full, a
dispute lost), its reversal run under the faults of the fulfilment rows (ledgerctl/prove.py)
and counted (calls and effects of each action, final state) once it has settled.

The rows, in order: a refund before the paid event; each take-back delivered three times
over and four times at once (two workers running); then, one worker at a time, with the
faults on the reversal's call (``PROVE_LEG=reverse``, ledgerctl/prove_worker.py): the
worker killed before it, inside it (three depths) and after it, paused inside it past its
lease, its answer held past FULFILMENT_TIMEOUT after it applied, and sent again with the
same idempotency key (a replay-safe reversal only); then a refund while the fulfilment's
own call was cut off (its worker killed inside it, the call may have applied): a built-in
action settles it; last, a refund while the payment waits queued, before any worker took
it.
"""

import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from subprocess import Popen

from rq import Queue

from ledgerctl import samples, takebacks
from ledgerctl.prove import DURING, Prover, RowTimeout, send_copies, stopped
from ledgerctl.prove_probe import (
    NOT_RUN,
    Probe,
    ReversalRow,
    cut_off_verdict,
    refunded_first_verdict,
    reversal_verdict,
)
from ledgerctl.prove_purchase import marked

Events = list[dict[str, object]]

AFTER_TAKE_BACK = ("reversed", "refunded_unfulfilled", "interrupted", "failed", "held")
"""Where a payment taken back settles; ``fulfilled`` too, once its take-back is recorded:
its reversal was never made due."""
TAKE_BACKS = {"full": "full refund", "dispute_lost": "dispute lost"}
"""The take-backs delivered in turn and at once (ledgerctl/takebacks.py kinds): a refund of
the whole amount (refund.created, charge.refunded, refund.updated) and a dispute closed
lost (charge.dispute.created, funds_withdrawn, closed)."""
EXPECTED = {
    "taken back": ("reversed",),
    "refunded first": ("refunded_unfulfilled",),
    "cut off": ("reversed", "refunded_unfulfilled"),
}
"""The states a row's payment should settle in, by how it was taken back; any other is
explained in the row's note (its last error, or why it is held)."""
FAULT_ROWS = 8
"""At most one pre-fulfilled payment for each fault row: before, three inside, after,
paused, late answer, resent."""


@dataclass
class ReversalProver:
    prover: Prover
    """The fulfilment rows' prover (its sweeper running, no worker): its scratch Redis,
    processes, probe and waits."""
    reversal_probe: Probe
    replay_safe: bool
    """REVERSAL_ACTION's own: only a replay-safe reversal is resent."""

    def rows(self) -> Iterator[ReversalRow]:
        p = self.prover
        steady = [p.procs.worker(p.env) for _ in range(2)]
        yield self.refunded_before_paid()
        count = 2 * len(TAKE_BACKS) + FAULT_ROWS
        paid = [[] for _ in range(count)] if self.late() else self.fulfilled(count)
        for kind, said in TAKE_BACKS.items():
            yield self.delivered(f"{said} delivered 3 times in turn", kind, 3, False, paid.pop())
            yield self.delivered(f"{said} delivered 4 times at once", kind, 4, True, paid.pop())
        p.procs.stop(steady)
        fulfil_depth = max(p.depths().values(), default=0)
        depth = max(p.depths("reversal_counts").values(), default=0)
        yield self.faulted("killed before the reversal call", "before", paid.pop())
        for part in DURING if depth else ():
            at = max(1, round(depth / part))
            name = f"killed during the reversal call (at {at} of {depth} function calls)"
            yield self.faulted(name, {"PROVE_STOP_AT": str(at)}, paid.pop())
        yield self.faulted("killed after the reversal call", "after", paid.pop())
        at = max(1, depth // 2)
        name = f"reversal paused past its lease (at {at} of {depth} function calls)"
        yield self.paused(name, at, paid.pop())
        timeout = p.ledger.settings.FULFILMENT_TIMEOUT
        name = f"reversal answered after FULFILMENT_TIMEOUT ({timeout:g} s), having applied"
        yield self.faulted(name, {"PROVE_SLOW": "1"}, paid.pop(), rescue=False)
        name = "reversal resent with the same idempotency key"
        if not self.replay_safe:
            note = "REVERSAL_ACTION is not replay-safe: the service resends none"
            yield ReversalRow(name, "", 0, 0, 0, 0, "", "skipped", note)
        else:
            yield self.faulted(name, {"PROVE_RESEND": "1"}, paid.pop(), rescue=False)
        if fulfil_depth:
            yield self.refunded_during_call(max(1, fulfil_depth // 2), fulfil_depth)
        yield self.refunded_while_queued()

    def payment(self) -> Events:
        """A card payment's events (ledgerctl/samples.py), its paid event marked as
        prove-action's; the last one, ``payment_intent.succeeded``, is the one recorded."""
        events: Events = samples.payment_events(self.prover.rng)
        marked(events[-1])
        return events

    def fulfilled(self, count: int) -> list[Events]:
        """``count`` payments recorded at once and left to the running workers to fulfil:
        each row's payment, fulfilled before its take-back (one not fulfilled in time is
        reported by its row)."""
        p = self.prover
        payments = [self.payment() for _ in range(count)]
        for events in payments:
            p.record(events[-1])
        for events in payments:
            self.until_settled(p.key_of(events[-1]))
        return payments

    def until_settled(self, pk: str) -> None:
        try:
            self.prover.wait(lambda: self.prover.settled(pk) and self.prover.quiet(pk), pk)
        except RowTimeout:
            pass

    def take_back(self, events: Events, kind: str = "full") -> None:
        for event in takebacks.for_payment(self.prover.rng, events, kind):
            self.prover.record(event)

    def refunded_before_paid(self) -> ReversalRow:
        name = "refunded in full before its paid event"
        if self.late():
            return late(name)
        events = self.payment()
        self.take_back(events)
        self.prover.record(events[-1])
        return self.settled_row(name, self.prover.key_of(events[-1]), "refunded first")

    def refunded_during_call(self, at: int, depth: int) -> ReversalRow:
        """The fulfilment's call killed at ``at`` of ``depth`` function calls, then the
        refund, then another worker: the payment is reversed if the call applied, its key
        voided if not (a built-in action's settlement), or held for a person."""
        name = f"refunded in full after its fulfilment call was killed (at {at} of {depth})"
        if self.late():
            return late(name)
        p = self.prover
        events = self.payment()
        doomed = p.procs.worker({**p.env, "PROVE_STOP_AT": str(at)})
        p.record(events[-1])
        pk = p.key_of(events[-1])
        helper = None
        try:
            p.wait(lambda: doomed.poll() is not None or p.settled(pk), "the fault")
            self.take_back(events)
            helper = p.procs.worker(p.env)
            return self.settled_row(name, pk, "cut off", not_reached=doomed.poll() is None)
        except RowTimeout as exc:
            return self.row(name, pk, "unsettled", str(exc))
        finally:
            p.procs.stop([doomed, *([helper] if helper else [])])

    def refunded_while_queued(self) -> ReversalRow:
        """Paid and refunded in full with no worker running, then a worker takes its job."""
        name = "refunded in full while queued, before any worker took it"
        if self.late():
            return late(name)
        p = self.prover
        events = self.payment()
        p.record(events[-1])
        self.take_back(events)
        queue = Queue(p.ledger.settings.QUEUE_NAME, connection=p.redis)
        worker = p.procs.worker(p.env)
        try:
            p.wait(lambda: queue.count == 0, "the worker to take its job")
            p.wait(lambda: queue.started_job_registry.count == 0, "its job to end")
            return self.settled_row(name, p.key_of(events[-1]), "refunded first")
        except RowTimeout as exc:
            return self.row(name, p.key_of(events[-1]), "unsettled", str(exc))
        finally:
            p.procs.stop([worker])

    def delivered(
        self, name: str, kind: str, copies: int, at_once: bool, paid: Events
    ) -> ReversalRow:
        if self.late():
            return late(name)
        unfulfilled = self.not_fulfilled(name, paid)
        if unfulfilled:
            return unfulfilled
        take_back = takebacks.for_payment(self.prover.rng, paid, kind)

        def send() -> None:
            for event in take_back:
                self.prover.record(event)

        send_copies(send, copies, at_once)
        return self.settled_row(name, self.prover.key_of(paid[-1]))

    def faulted(
        self, name: str, fault: str | dict[str, str], paid: Events, rescue: bool = True
    ) -> ReversalRow:
        """One worker with ``fault`` on its reversal call takes the payment's reversal; once
        it has died (``rescue``), another worker runs whatever the ledger hands out next."""
        if self.late():
            return late(name)
        unfulfilled = self.not_fulfilled(name, paid)
        if unfulfilled:
            return unfulfilled
        if isinstance(fault, str):  # a fault point of ledger/faults.py
            fault = {"FAULTPOINT": f"{fault}_action"}
        p = self.prover
        pk = p.key_of(paid[-1])
        doomed = p.procs.worker({**p.env, **fault, "PROVE_LEG": "reverse"})
        self.take_back(paid)
        helpers: list[Popen[bytes]] = []
        try:
            if rescue:
                settled = lambda: p.settled(pk, AFTER_TAKE_BACK)  # noqa: E731
                p.wait(lambda: doomed.poll() is not None or settled(), "the fault")
                helpers.append(p.procs.worker(p.env))
            return self.settled_row(name, pk, not_reached=doomed.poll() is None and rescue)
        finally:
            p.procs.stop([doomed, *helpers])

    def paused(self, name: str, at: int, paid: Events) -> ReversalRow:
        """SIGSTOP inside the reversal's call; SIGCONT once the payment has left that
        attempt."""
        if self.late():
            return late(name)
        unfulfilled = self.not_fulfilled(name, paid)
        if unfulfilled:
            return unfulfilled
        p = self.prover
        pk = p.key_of(paid[-1])
        fault = {"PROVE_STOP_AT": str(at), "PROVE_STOP": "pause", "PROVE_LEG": "reverse"}
        doomed = p.procs.worker({**p.env, **fault})
        self.take_back(paid)
        helper = None
        try:
            settled = lambda: p.settled(pk, AFTER_TAKE_BACK)  # noqa: E731
            p.wait(lambda: stopped(doomed.pid) or settled(), "the worker paused")
            token = p.field(pk, "token")
            helper = p.procs.worker(p.env)
            p.wait(lambda: p.field(pk, "token") != token or settled(), "its lease")
            doomed.send_signal(signal.SIGCONT)
            return self.settled_row(name, pk)
        except RowTimeout as exc:
            return self.row(name, pk, "unsettled", str(exc))
        finally:
            p.procs.stop([doomed, *([helper] if helper else [])])

    def not_fulfilled(self, name: str, paid: Events) -> ReversalRow | None:
        """The row of a payment whose fulfilment did not succeed: nothing to take back."""
        pk = self.prover.key_of(paid[-1])
        state = self.prover.field(pk, "state")
        if state == "fulfilled":
            return None
        why = self.prover.field(pk, "last_error") or self.prover.field(pk, "hold_reason")
        note = f"its fulfilment did not succeed, no take-back sent: {why}".rstrip(": ")
        return self.row(name, pk, f"not fulfilled ({state or 'unknown'})", note)

    def settled_row(
        self, name: str, pk: str, kind: str = "taken back", not_reached: bool = False
    ) -> ReversalRow:
        p = self.prover
        states = AFTER_TAKE_BACK + ("fulfilled",)
        try:
            p.wait(lambda: p.settled(pk, states) and p.quiet(pk), f"{pk} to settle")
            sweeps = p.sweeps() + 2  # further sweeps must change nothing
            p.wait(lambda: p.sweeps() >= sweeps, "two more sweeps")
            p.wait(lambda: p.quiet(pk), f"every call for {pk} to return")
        except RowTimeout as exc:
            return self.row(name, pk, "unsettled", str(exc))
        note = "the fault was not reached: the call is shallower" if not_reached else ""
        if p.field(pk, "state") not in EXPECTED[kind]:
            note = note or p.field(pk, "last_error") or p.field(pk, "hold_reason")
        if p.field(pk, "key_voided") == "1":
            note = note or "settled: its key voided, no effect can follow"
        return self.row(name, pk, "", note, kind)

    def row(
        self, name: str, pk: str, verdict: str, note: str, kind: str = "taken back"
    ) -> ReversalRow:
        """The counts of ``pk`` now; its verdict from them unless given."""
        p = self.prover
        calls, reversal_calls = p.calls()[pk], p.calls("reversal_calls")[pk]
        effects, reversals, state = p.probe(pk), self.reversal_probe(pk), p.field(pk, "state")
        if not verdict and kind == "refunded first":
            verdict = refunded_first_verdict(calls, effects, reversal_calls + reversals, state)
        elif not verdict:
            judge = cut_off_verdict if kind == "cut off" else reversal_verdict
            verdict = judge(effects, reversals, state)
        return ReversalRow(
            name, pk, calls, effects, reversal_calls, reversals, state, verdict, note
        )

    def late(self) -> bool:
        return time.monotonic() > self.prover.deadline


def late(name: str) -> ReversalRow:
    return ReversalRow(name, "", 0, 0, 0, 0, "", NOT_RUN, "--max-seconds reached before it")


def caption(rows: list[ReversalRow], replay_safe: bool) -> str:
    failed = [row.fault for row in rows if not row.ok and row.verdict != NOT_RUN]
    said = f"FAILED: {', '.join(failed)}" if failed else "every payment reversed at most once"
    left = [row.fault for row in rows if row.verdict == NOT_RUN]
    said += f"; not run (--max-seconds): {', '.join(left)}" if left else ""
    return f"{len(rows)} reversal fault(s); replay-safe: {'yes' if replay_safe else 'no'}; {said}"
