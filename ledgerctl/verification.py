"""What ``webhook-ledger verify`` finds: each check passed or the failure it reports."""

from collections.abc import Iterator
from contextlib import contextmanager


class Verification:
    def __init__(self) -> None:
        self.passed = 0
        self.failures: list[str] = []

    def expect(self, condition: bool, message: str) -> bool:
        if condition:
            self.passed += 1
        else:
            self.failures.append(message)
        return condition

    @contextmanager
    def records(self, name: str) -> Iterator[None]:
        """Checks over a file's records: a record not shaped as export writes it is a failure."""
        try:
            yield
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            why = f"{type(exc).__name__}: {exc}"
            self.failures.append(f"{name}: records not as an export writes them ({why})")
