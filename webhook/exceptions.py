"""The intake's refusal of a delivery; the receiver turns it into an HTTP answer."""


class Rejected(Exception):
    """A delivery that is refused; ``reason`` is the counted, machine-readable cause."""

    def __init__(self, reason: str, status: int = 400, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.status = status
        self.detail = detail
