"""The model's worker: what one fulfilment-worker process holds of the job it took."""

from dataclasses import dataclass

from ledger import keys
from ledger.gate import Admission
from tests.support.protocol.constants import GO


@dataclass
class Worker:
    payment: str
    token: int
    leg: str = "fulfil"  # "reverse": its reversal; "refulfil": after a dispute won; "settle"
    replay_safe: bool = False
    fenced_at: int | None = None  # on the worker's own clock (real ms); None until it may call
    outcome: str = ""  # set once it has called
    admission: Admission = GO  # what the gate answered (a probe, a breaker counting failures)
    refund: str = ""  # the refund its reversal is for ("": the whole payment, or the rest)
    amount: int | None = 0  # what its reversal takes back (None: what remains, not known)
    found: bool = False  # its settlement found the payment's key (the effect applied)
    paid: int | None = None  # the amount paid its call's purchase carries (None: not known)
    downstream: str = ""  # FULFILMENT_ACTION's when it started (the_action_moves)
    # FULFILMENT_ACTION's in the worker's deployment, the one jobs.py checked a reversal
    # against when it took the job: a move after that leaves this worker's actions as they were
    deployed: str = ""
    breaker: keys.Breaker = keys.FULFILMENT_BREAKER  # the one that admitted it (its downstream's)
