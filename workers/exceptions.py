"""Domain errors of fulfilment. Workers raise these, never HTTP errors."""


class FulfilmentError(Exception):
    """Base class of every error raised by the workers package."""


class TransientDownstreamError(FulfilmentError):
    """The downstream may succeed later (5xx, timeout, connection refused): retry."""


class AmbiguousDownstreamError(TransientDownstreamError):
    """The request reached the downstream but no answer came back (a read timeout, a reset):
    it may have been applied. Retried only when the action is replay-safe; otherwise the
    payment is ``interrupted`` for a person."""


class PermanentDownstreamError(FulfilmentError):
    """The downstream refused for good (a 4xx other than 409): fail, no retry."""


class ActionConfigError(FulfilmentError):
    """FULFILMENT_ACTION cannot be understood."""
