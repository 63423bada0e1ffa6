"""The typed API for action authors (workers/api.py): the example actions are ``mypy
--strict`` clean, and each exception and the replay-safe mark mean what the module says
when the real job code maps them."""

import inspect
import json
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest

from examples.actions import grant_access
from ledger import purchase as built
from ledger import purchase_invoice as built_invoice
from ledger import refund_notes, reversals
from ledger import settings as settings_module
from ledger.events import Policy, classify
from ledger.purchase import Purchase, purchase_of
from ledgerctl import samples
from tests.support.processes import ROOT
from workers import api
from workers.actions import CallableAction, build_action
from workers.api import DownstreamDown, GiveUp, RetryLater
from workers.gating import health_of
from workers.jobs import run_action


def test_the_api_and_its_example_are_mypy_strict_clean() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent"]
        + ["--no-incremental", "workers/api.py", "examples/actions.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def call(amount: int | None = 2000) -> Purchase:
    paid = {"amount": str(amount)} if amount is not None else {}
    return purchase_of("pi_1", 1, {**paid, "currency": "usd", "events": "evt_1"})


@pytest.mark.parametrize(
    "name",
    ["Purchase", "PaidBy", "CustomerDetails", "CheckoutSession", "Invoice", "InvoiceLine"]
    + ["LineItem", "PurchaseMetadata", "Shipping", "Address"],
)
def test_the_typed_purchase_has_the_fields_the_actions_receive(name: str) -> None:
    """workers/api.py's TypedDicts name exactly the fields ledger/purchase.py builds (an
    invoice's part in ledger/purchase_invoice.py)."""
    typed = getattr(api, name).__annotations__
    struct = getattr(built, name, None) or getattr(built_invoice, name)
    assert set(typed) == {f.name for f in msgspec.structs.fields(struct)}


def test_the_typed_reversal_has_the_fields_a_reversal_action_receives() -> None:
    """workers/api.py's Reversal and ReversalCall name exactly the fields ledger/reversals.py
    builds and a REVERSAL_ACTION receives (a TypedDict's own annotations leave out what it
    inherits: the purchase's)."""
    names = {f.name for f in msgspec.structs.fields(reversals.Reversal)}
    assert set(api.Reversal.__annotations__) == names
    refund_names = {f.name for f in msgspec.structs.fields(refund_notes.RefundTaken)}
    assert set(api.RefundTaken.__annotations__) == refund_names
    call_names = {f.name for f in msgspec.structs.fields(reversals.ReversalCall)}
    assert {**api.Purchase.__annotations__, **api.ReversalCall.__annotations__}.keys() == call_names
    stored = {"reversal_refund": "re_1", "reversal_amount": "500", "rf": '{"re_1": 500}'}
    sent = reversals.reversal_of(call(), stored).to_dict()
    assert set(sent) == call_names and set(sent["reversal"]) == names
    assert sent["idempotency_key"] == "reverse:pi_1:re_1" and sent["reversal"]["amount"] == 500


def test_the_payment_key_is_documented_as_every_id_it_can_be() -> None:
    """A free Checkout (no PaymentIntent, ``amount_total`` 0) is keyed by its session: its
    ``payment_key`` is ``cs_…``, its Idempotency-Key ``fulfil:cs_…``. The typed purchase's
    and the README's words for the key said only "the PaymentIntent id, or the invoice's"."""
    free = json.loads(samples.template("checkout.session.completed"))
    free["data"]["object"] |= {"payment_status": "no_payment_required", "amount_total": 0}
    free["data"]["object"]["payment_intent"] = None
    policy = Policy(frozenset(settings_module.Settings.PAID_EVENT_TYPES), mode="test")
    key = classify(free, policy).payment_key
    assert key is not None and key.startswith("cs_")
    sent = purchase_of(key, 1, {"amount": "0", "currency": "usd", "events": "evt_1"})
    assert sent.idempotency_key == f"fulfil:{key}" and sent.payment_intent is None
    source = inspect.getsource(api.Purchase)
    said = source.partition("payment_key: str")[2].partition("idempotency_key: str")[0]
    assert all(f"``{p}_…``" in said for p in ("cs", "in", "ch")) and "PaymentIntent" in said
    readme = (ROOT / "README.md").read_text()
    first = readme.partition("payment key (")[2].partition(")")[0]
    assert "`cs_…`" in first and "`in_…`" in first


def test_a_replay_safe_action_is_re_run_and_applies_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SHOP_DB", str(tmp_path / "shop.sqlite3"))
    s = settings_module.load({}, FULFILMENT_ACTION="examples.actions:grant_access")
    action = build_action(s)
    assert isinstance(action, CallableAction) and action.replay_safe is True
    assert grant_access.replay_safe is True  # type: ignore[attr-defined]
    first = run_action(action, call(), 5, 1)
    again = run_action(action, call(), 5, 1)
    assert first[0] == again[0] == "fulfilled"
    assert '"granted":true' in first[1] and '"granted":false' in again[1]


def test_give_up_fails_the_payment_at_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SHOP_DB", str(tmp_path / "shop.sqlite3"))
    action = CallableAction("examples.actions:grant_access", False)
    outcome, detail, *_ = run_action(action, call(amount=None), 5, 1)
    assert (outcome, detail) == ("failed", "pi_1: no amount paid")


@pytest.mark.parametrize(
    ("error", "outcome", "health", "refused"),
    [
        (RetryLater("busy"), "retry", ("up", True, 0.0), True),
        (GiveUp("no such product"), "failed", ("up", True, 0.0), True),
        (DownstreamDown("502 from its gateway"), "retry", ("down", True, 0.0), False),
        (DownstreamDown("in maintenance", 30, sent=False), "retry", ("down", False, 30.0), True),
        (DownstreamDown("refused", sent=False), "retry", ("down", False, 0.0), True),
        (KeyError("sku"), "retry", ("none", True, 0.0), False),  # how far did it get?
    ],
)
def test_each_exception_means_what_it_says(error, outcome, health, refused) -> None:
    """A refusal applied nothing (the ledger's ``refused``: a replay-safe call of it no
    longer counts as one that may have applied); an unexpected exception may have, and so
    may a DownstreamDown whose request left (``sent``, its default)."""

    def raising(purchase: object) -> None:
        raise error

    action = CallableAction("examples.actions:grant_access", False)
    action.fn = raising
    got, _, seen, said_refused = run_action(action, call(), 5, 1)
    assert got == outcome and said_refused is refused
    assert (seen.kind, seen.sent, seen.retry_after_s) == health
    assert not refused or health_of(error).kind == health[0]  # (the action wraps a KeyError)
    action.replay_safe = False  # (grant_access is replay-safe)
    again, _, _, said_again = run_action(action, call(), 5, 1)
    assert said_again is refused  # the same, replay-safe or not
    assert again == (outcome if refused else "interrupted")  # may have applied: a person's


def test_a_receipt_json_has_no_type_for_is_kept_as_text() -> None:
    """What a module:function returns after applying its effect (a Decimal read from a
    NUMERIC column, a datetime) is kept as an effect's receipt is: as its text, the payment
    fulfilled. Before, the job crashed after the call and the payment ended interrupted."""
    at = datetime(2026, 12, 5, 13, 0, tzinfo=UTC)
    action = CallableAction("examples.actions:grant_access", False)
    action.fn = lambda purchase: {"charged": Decimal("20.00"), "at": at, "entitlement": 7}
    outcome, detail, *_ = run_action(action, call(), 5, 1)
    assert outcome == "fulfilled"
    assert json.loads(detail) == {"charged": "20.00", "at": str(at), "entitlement": 7}
    action.fn = lambda purchase: Decimal("1.5")
    assert json.loads(run_action(action, call(), 5, 1)[1]) == {"result": "1.5"}


@pytest.mark.parametrize(
    "returned",
    [
        {"order": 2**64},  # a UUID's .int
        {"note": "\ud800"},  # a lone surrogate
        {(1, 2): "a tuple key"},
        {"nested": [{"big": -(2**70)}]},
    ],
    ids=["big int", "surrogate", "tuple key", "nested big int"],
)
def test_a_receipt_the_ledger_cannot_store_as_is_is_kept_as_its_text(returned: object) -> None:
    """The call has applied: what it returned is stored whatever it holds. Before, a value
    the standard json module takes and orjson (the ledger's) refuses crashed the job after
    the effect, the payment interrupted, or failed once every re-run crashed the same way."""
    action = CallableAction("examples.actions:grant_access", False)
    action.fn = lambda purchase: returned
    outcome, detail, *_ = run_action(action, call(), 5, 1)
    assert outcome == "fulfilled"
    assert json.loads(detail) == {"unstorable": ascii(returned)}
