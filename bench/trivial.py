"""The trivial RQ job that fulfilment is compared against: does nothing."""


def noop(payment_key: str) -> None:
    return None
