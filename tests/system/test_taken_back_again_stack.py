"""Stripe gives a reversed payment back, a person grants it again, then Stripe takes it back
again: with real gunicorn, real RQ workers and the sweeper, and the person at the
``webhook-ledger`` command line (docs/REVERSAL.md, "Taken back again")."""

import subprocess

from ledger import keys
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import after_sweeps, settled_as, state_of
from tests.support.processes import BIN, ROOT, wait_until
from tests.support.refunds import refund_events, refund_failed
from tests.support.stack import Stack
from tests.system.test_reversal import paid, send_all


def webhook_ledger(s: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "webhook-ledger"), *args],
        env={**s.env, "COLUMNS": "200"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_granted_again_then_refunded_again_is_taken_back_by_a_person(stack, redis, rng) -> None:
    """Before, the second refund was only recorded: the customer had the money back twice over
    and the purchase. Each refund's events are sent twice."""
    with CountingDownstream() as fulfil, CountingDownstream() as reverse:
        s = stack(FULFILMENT_ACTION=fulfil.url, REVERSAL_ACTION=reverse.url)
        s.start_service()
        pk, amount = paid(s, rng)
        wait_until(lambda: settled_as(redis, pk, "fulfilled"))
        first = refund_events(rng, pk, amount, amount)
        send_all(s, first + first)
        wait_until(lambda: settled_as(redis, pk, "reversed"))
        send_all(s, [refund_failed(rng, first[0])] * 2)
        wait_until(lambda: state_of(redis, pk) == "held")
        refused = webhook_ledger(s, "retry", pk)
        assert refused.returncode == 1 and "Only a person decides" in refused.stdout
        granted = webhook_ledger(s, "resolve", pk, "--fulfilled")
        assert granted.returncode == 0 and f"{pk}: fulfilled" in granted.stdout, granted.stdout
        second = refund_events(rng, pk, amount, amount)
        send_all(s, second + second)
        wait_until(lambda: state_of(redis, pk) == "held")
        shown = webhook_ledger(s, "payment", pk).stdout
        assert "refunded in full after it was granted again" in shown, shown
        taken = webhook_ledger(s, "resolve", pk, "--fulfilled")
        assert taken.returncode == 0 and f"{pk}: reversed" in taken.stdout, taken.stdout
        after_sweeps(redis)
        assert state_of(redis, pk) == "reversed"
        assert (fulfil.calls[pk], reverse.calls[pk]) == (1, 1)  # the rest was by hand
        assert redis.hget(keys.STATS, "resolved_reversed") == b"1"
