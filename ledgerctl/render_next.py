"""What a person does next with a payment that waits for them, as ``webhook-ledger payment``
prints it below its tables: the wording of ledger/read/next_step.py, which the dashboard's
payment page shows too."""

from rich.text import Text

from ledger.read.next_step import next_step
from ledger.read.payments import Payment
from ledgerctl.terminal import line


def lines(p: Payment) -> list[Text]:
    """The check, the key its calls carry and each decision's command; none unless the
    payment waits for a person's decision."""
    step = next_step(p)
    if step is None:
        return []
    shown = [line(Text("Next:", "bold"), f"{step.check}, then:")]
    if step.idempotency_key:
        shown.append(line("  idempotency key of its calls (what the downstream saw):"))
        shown[-1].append_text(line("", step.idempotency_key))
    width = max(len(command) for command, _ in step.commands)
    shown += [line(f"  {command.ljust(width)}  # {meant}") for command, meant in step.commands]
    return shown
