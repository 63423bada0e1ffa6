"""The lines that name every payment and delivery failing a replay run, on stderr."""

from rich.console import Console
from rich.text import Text

from ledgerctl.checker import Findings
from ledgerctl.reversal_check import ReversalFindings
from ledgerctl.terminal import line

WAITING = "waiting for a person (webhook-ledger payment says why)"


def print_failing(
    console: Console,
    findings: Findings,
    unacked: int,
    reversals: ReversalFindings | None = None,
) -> None:
    """Name every payment and delivery that fails the run, on stderr."""
    failing = Text("failing:", "red")
    for item in findings.duplicated + findings.lost:
        console.print(line(failing, item))
    for pk in findings.unfulfilled + findings.unexpected + findings.interrupted:
        console.print(line(failing, pk))
    if reversals is not None:
        for item in reversals.twice + reversals.orphaned + reversals.called_after_refund:
            console.print(line(failing, "reversal", item))
        for pk in reversals.missing:
            console.print(line(failing, "reversal", pk))
        for pk in reversals.for_a_person:  # its reversal may be done: a person's step waits
            console.print(
                line(failing, "waiting for a person (webhook-ledger payment says why)", pk)
            )
        for pk in reversals.not_regranted:
            console.print(line(failing, "not re-granted after its dispute was won", pk))
        for pk in reversals.not_held:
            console.print(line(failing, "not held for a person after its refund failed", pk))
    if unacked:
        console.print(line(failing, f"{unacked} valid deliveries were not acknowledged"))
