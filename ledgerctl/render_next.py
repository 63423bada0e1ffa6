"""What a person does next with a payment that waits for them, as ``webhook-ledger payment``
prints it below its tables: the wording of ledger/read/next_step.py, which the dashboard's
payment page shows too."""

from rich.text import Text

from ledger.read.next_step import next_step
from ledger.read.payments import Payment
from ledgerctl.terminal import line


def lines(p: Payment, reverses: bool) -> list[Text]:
    """The check, the key its calls carry and each decision's command; none unless the
    payment waits for a person's decision (``reverses``: REVERSAL_ACTION is set)."""
    step = next_step(p, reverses)
    if step is None:
        return []
    shown = [line(Text("Next:", "bold"), f"{step.check}, then:")]
    if step.idempotency_key:
        shown.append(line(f"  {step.key_said[0].lower()}{step.key_said[1:]}:"))
        shown[-1].append_text(line("", step.idempotency_key))
    width = max(len(command) for command, _ in step.commands)
    shown += [line(f"  {command.ljust(width)}  # {meant}") for command, meant in step.commands]
    return shown
