"""Errors of the intake and the ledger; views turn them into HTTP answers."""


class WebhookError(Exception):
    """Base class of every error raised by the webhook package."""


class Rejected(WebhookError):
    """A delivery that is refused; ``reason`` is the counted, machine-readable cause."""

    def __init__(self, reason: str, status: int = 400, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.status = status
        self.detail = detail


class UnknownPayment(WebhookError):
    """No payment record under that key."""


class InvalidTransition(WebhookError):
    """The payment is not in a state that allows the requested change."""
