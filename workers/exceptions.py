"""Domain errors of fulfilment. Workers raise these, never HTTP errors."""


class FulfilmentError(Exception):
    """Base class of every error raised by the workers package."""


class TransientDownstreamError(FulfilmentError):
    """The downstream may succeed later (5xx, timeout, connection refused): retry.

    ``down``: the failure says the downstream as a whole is unavailable (counted by the
    circuit breaker); ``sent``: whether the request left (False: refused, DNS, connect
    timeout); ``retry_after``: seconds the downstream asked to wait (429/503), else 0."""

    def __init__(
        self, message: str, down: bool = False, sent: bool = True, retry_after: float = 0.0
    ) -> None:
        super().__init__(message)
        self.down = down
        self.sent = sent
        self.retry_after = retry_after


class AmbiguousDownstreamError(TransientDownstreamError):
    """The request reached the downstream and what came back does not say whether it was
    applied (a read timeout, a reset, a gateway's 502, the origin's 500): it may have been.
    Retried only when the action is replay-safe; otherwise the payment is ``interrupted``
    for a person. ``answered``: the downstream itself answered (a 500), so it is up."""

    def __init__(self, message: str, down: bool = False, answered: bool = False) -> None:
        super().__init__(message, down=down)
        self.answered = answered


class PermanentDownstreamError(FulfilmentError):
    """The downstream refused for good (a 4xx other than 409 and 429): fail, no retry."""


class ActionConfigError(FulfilmentError):
    """The action cannot run as configured; ``setting`` names the setting to change."""

    def __init__(self, message: str, setting: str = "FULFILMENT_ACTION") -> None:
        super().__init__(message)
        self.setting = setting
