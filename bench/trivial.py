"""The trivial RQ job that fulfilment is compared against: does nothing."""


def noop(payment_key: str) -> None:
    return None


def noop_action(call: dict) -> dict:
    """A downstream that does nothing (``FULFILMENT_ACTION=bench.trivial:noop_action``): ours
    without the SQLite commit, to tell the ledger's cost from the effect's."""
    return {"noop": True}
