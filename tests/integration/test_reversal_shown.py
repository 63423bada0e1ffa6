"""Refunds, disputes and reversals seen everywhere a person or a program looks: the ops API
(the payment's reversal object, the summary's counts), the dashboard (the overview, the
payment page, the list of what needs a person), ``webhook-ledger`` and ``/metrics``, on a
ledger the real scripts, the real job and the built-in SQLite downstream (for both actions)
brought there (tests/support/reversal_ledger.py; docs/REVERSAL.md), with each refund its own
reversal and a dispute won fulfilled again too (``taken_again``)."""

import json
import re
from typing import Any

from ledger import keys
from tests.integration.test_metrics_alerting import scrape
from tests.support.constants import BASIC, BEARER
from tests.support.helpers import run_cli, settled_as
from tests.support.refunds import dispute_event, refund_events
from tests.support.reversal_ledger import paid


def api(client: Any, route: str) -> Any:
    answer = client.get(f"/ops/api/{route}", headers=BEARER)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return answer.get_json()


def test_the_api_shows_each_payment_s_refunds_dispute_and_reversal(client, taken) -> None:
    t = taken
    r = api(client, f"payments/{t.reversed}")
    assert (r["state"], r["leg"]) == ("reversed", "reverse")
    rv = r["reversal"]
    assert [f["amount"]["minor_units"] for f in rv["refunds"]] == [t.amounts[t.reversed]]
    assert rv["refunded"]["minor_units"] == t.amounts[t.reversed] and rv["taken_back"] == "refund"
    assert rv["due"] and rv["why"] == "refund" and rv["idempotency_key"] == f"reverse:{t.reversed}"
    assert rv["attempts_started"] == 1 and rv["after_token"] == 1 and rv["reversed_at"]
    assert rv["receipt"]["outcome"] == "applied"  # the SQLite downstream's
    assert [a["leg"] for a in r["attempts"]] == ["fulfil", "reverse"]
    # the reversal's attempt ended when it was reversed, not when the payment was fulfilled
    assert all(a["duration_ms"] is not None and a["duration_ms"] >= 0 for a in r["attempts"])
    assert r["downstream"]["reversals"] == 1 and r["downstream"]["reversal_calls"] == 1
    assert r["downstream"]["reversed_at"] is not None

    p = api(client, f"payments/{t.partial}")
    quarter = t.amounts[t.partial] // 4
    assert (p["state"], p["leg"], p["reversal"]["taken_back"]) == ("fulfilled", "fulfil", None)
    assert p["reversal"]["refunded"]["minor_units"] == quarter and not p["reversal"]["due"]
    assert p["reversal"]["refunds"][0]["counted"] is True

    d = api(client, f"payments/{t.reinstated}")
    assert (d["state"], d["leg"]) == ("held", "reverse")
    assert d["reversal"]["dispute"]["status"] == "won" and d["reversal"]["why"] == "dispute"
    assert d["reversal"]["reinstated_at"] and d["reversal"]["reversed_at"]

    u = api(client, f"payments/{t.unfulfilled}")
    assert (u["state"], u["reversal"]["taken_back"], u["reversal"]["due"]) == (
        "refunded_unfulfilled",
        "refund",
        False,
    )
    assert u["attempts"] == [] and u["receipt"] is None

    i = api(client, f"payments/{t.interrupted}")
    assert (i["state"], i["leg"]) == ("interrupted", "reverse")
    assert i["last_error"].startswith("reversal: ") and i["reversal"]["attempts_started"] == 1


def test_the_summary_counts_reversals_and_who_waits_on_what(client, taken) -> None:
    s = api(client, "summary")
    assert s["reversals"] == {
        "due": 3,
        "reversed": 2,
        "resolved_reversed": 0,
        "refunded_unfulfilled": 1,
        "refund_reversals": 0,
        "reinstated": 1,
        "refulfils_due": 0,
        "refulfilled": 0,
        "settles_due": 0,
        "settled_voided": 0,
        "settled_applied": 0,
    }
    assert s["payments_by_state"]["reversed"] == 1
    assert s["payments_by_state"]["refunded_unfulfilled"] == 1
    assert s["needs_a_person"]["reverse"] == {"interrupted": 1, "held": 1, "failed": 0}
    assert s["needs_a_person"]["fulfil"] == {"interrupted": 0, "held": 0, "failed": 0}
    rows = api(client, "payments?state=attention")["payments"]
    assert {(p["payment_key"], p["leg"]) for p in rows} == {
        (taken.interrupted, "reverse"),
        (taken.reinstated, "reverse"),
    }


def test_the_dashboard_shows_them(client, taken) -> None:
    t = taken
    overview = client.get("/ops/", headers=BASIC).get_data(as_text=True)
    assert 'id="reversals-due">3<' in overview and 'id="reversals-reversed">2<' in overview
    assert 'id="reversals-refunded_unfulfilled">1<' in overview
    assert 'id="reversals-interrupted">1<' in overview
    assert 'id="payments-refunded_unfulfilled">1<' in overview
    assert "reversal: " in overview and "dispute won after its reversal" in overview

    page = client.get(f"/ops/payments/{t.reversed}", headers=BASIC).get_data(as_text=True)
    assert 'id="taken-back">refunded in full' in page and 'id="reversed-at"' in page
    assert f"reverse:{t.reversed}" in page and 'id="reversal-receipt"' in page
    assert '<td data-label="of">reversal</td>' in page
    assert '<span class="pill fulfilled">reversed</span>' in page  # its call reversed it

    page = client.get(f"/ops/payments/{t.partial}", headers=BASIC).get_data(as_text=True)
    assert "(partial: takes nothing back)" in page
    stays = r"no: refunded [\d.]+ \w+ of [\d.]+ \w+, the effect stays"
    assert re.search(f'id="taken-back"><span class="muted">{stays}<', page)

    page = client.get(f"/ops/payments/{t.interrupted}", headers=BASIC).get_data(as_text=True)
    assert 'id="reversal-error">reversal: ' in page and "It was taken back: mark reversed" in page

    page = client.get(f"/ops/payments/{t.reinstated}", headers=BASIC).get_data(as_text=True)
    assert 'id="reinstated"' in page and "Granted by hand: mark fulfilled" in page
    assert "run again" not in page  # a retry is refused: nothing of the ledger's runs again

    page = client.get(f"/ops/payments/{t.unfulfilled}", headers=BASIC).get_data(as_text=True)
    assert "taken back before any effect, never called" in page


def test_the_cli_shows_them(config, taken) -> None:
    t = taken
    shown = run_cli(config, "payment", t.reversed)
    assert shown.exit_code == 0, shown.output
    assert "Refunds and disputes" in shown.stdout and "refunded in full" in shown.stdout
    assert f"reverse:{t.reversed}" in shown.stdout
    rows = shown.stdout[shown.stdout.index("Attempts") :].splitlines()
    [reversal] = [row for row in rows if " reversal " in row]
    [fulfilment] = [row for row in rows if " fulfilment " in row]
    assert " reversed " in reversal and " fulfilled " in fulfilment, rows
    partial = run_cli(config, "payment", t.partial).stdout
    assert re.search(
        r"taken back +│ no: refunded [\d.]+ \w+ of [\d.]+ \w+, the effect stays", partial
    )
    summary = run_cli(config, "summary").stdout
    assert "reversals due" in summary and "reversals interrupted: a person's job" in summary
    listed = run_cli(config, "payments", "--state", "attention").stdout
    assert "reversal: " in listed and "dispute won after its" in listed
    assert "interrupted (reversal)" in listed and "held (reversal)" in listed
    printed = json.loads(run_cli(config, "payment", t.interrupted, "--json").stdout)
    assert printed["reversal"]["due"] and printed["leg"] == "reverse"


def test_metrics_count_reversals_and_split_who_waits_by_leg(client, taken) -> None:
    m = scrape(client)
    assert m["webhook_reversals_due_total"][()] == 3
    assert m["webhook_reversal_effects_total"][()] == 2
    assert m["webhook_reversals_resolved_total"][()] == 0
    assert m["webhook_refunded_unfulfilled_total"][()] == 1
    assert m["webhook_reversals_reinstated_total"][()] == 1
    waiting = {
        (dict(k)["state"], dict(k)["leg"]): v
        for k, v in m["webhook_payments_need_a_person"].items()
    }
    assert waiting == {
        ("failed", "fulfil"): 0,
        ("interrupted", "fulfil"): 0,
        ("held", "fulfil"): 0,
        ("failed", "reverse"): 0,
        ("interrupted", "reverse"): 1,
        ("held", "reverse"): 1,
    }
    states = {dict(k)["state"]: v for k, v in m["webhook_payments"].items()}
    assert states["reversed"] == 1 and states["refunded_unfulfilled"] == 1


def test_each_refund_s_reversal_and_a_fulfilment_again_are_shown(client, config, taken_again):
    t = taken_again
    p = api(client, f"payments/{t.per_refund}")
    assert (p["state"], p["leg"]) == ("fulfilled", "fulfil")
    rv = p["reversal"]
    shown = {f["id"]: f["reversed"]["minor_units"] for f in rv["refunds"]}
    assert shown == t.refunds and rv["reversed_amount"]["minor_units"] == sum(t.refunds.values())
    assert rv["taken_back"] is None and rv["refulfil"] is None
    # each reversal's attempt is labelled by the leg its record names, not by its token
    assert [a["leg"] for a in p["attempts"]] == ["fulfil", "reverse", "reverse"]

    d = api(client, f"payments/{t.refulfilled}")
    assert (d["state"], d["leg"]) == ("fulfilled", "refulfil")
    g = d["reversal"]["refulfil"]
    assert g["idempotency_key"] == f"refulfil:{t.refulfilled}" and g["refulfilled_at"]
    assert g["attempts_started"] == 1 and g["after_token"] == 2
    assert g["receipt"]["outcome"] == "applied"  # the SQLite downstream's
    assert d["reversal"]["reversed_amount"]["minor_units"] == t.amounts[t.refulfilled]
    assert d["reversal"]["attempts_started"] == 1 and d["reversal"]["why"] == "dispute"
    assert [a["leg"] for a in d["attempts"]] == ["fulfil", "reverse", "refulfil"]
    assert (d["downstream"]["effects"], d["downstream"]["regrants"]) == (1, 1)
    assert all(a["ended_at"] for a in d["attempts"])

    assert api(client, "summary")["reversals"] == {
        "due": 3,
        "reversed": 3,
        "resolved_reversed": 0,
        "refunded_unfulfilled": 0,
        "refund_reversals": 2,
        "reinstated": 1,
        "refulfils_due": 1,
        "refulfilled": 1,
        "settles_due": 0,
        "settled_voided": 0,
        "settled_applied": 0,
    }
    overview = client.get("/ops/", headers=BASIC).get_data(as_text=True)
    assert 'id="reversals-refund_reversals">2<' in overview
    assert 'id="reversals-refulfils_due">1<' in overview
    assert 'id="reversals-refulfilled">1<' in overview

    page = client.get(f"/ops/payments/{t.per_refund}", headers=BASIC).get_data(as_text=True)
    assert 'id="reversed-amount"' in page
    assert all(f'id="refund-reversed-{rid}"' in page for rid in t.refunds)
    page = client.get(f"/ops/payments/{t.refulfilled}", headers=BASIC).get_data(as_text=True)
    assert 'id="refulfilled-at"' in page and 'id="refulfil-receipt"' in page
    assert f"refulfil:{t.refulfilled}" in page and "fulfilled again" in page
    assert '<td data-label="of">fulfilment again</td>' in page

    shown = run_cli(config, "payment", t.refulfilled).stdout
    assert "fulfilled again" in shown and f"refulfil:{t.refulfilled}" in shown
    assert "fulfilment again" in shown  # its attempt's leg
    shown = run_cli(config, "payment", t.per_refund).stdout
    assert "reversed in all" in shown and shown.count("(reversed ") == 2
    assert re.search(
        r"taken back +│ no: refunded \S+ \w+ of \S+ \w+, its refunds reversed on", shown
    )
    summary = run_cli(config, "summary").stdout
    assert "fulfilled again" in summary and "one refund's" in summary

    m = scrape(client)
    assert m["webhook_refund_reversals_total"][()] == 2
    assert m["webhook_refulfils_due_total"][()] == 1
    assert m["webhook_refulfilled_total"][()] == 1


def test_a_payment_reversed_refund_by_refund_shows_each_refund_s_key_not_one_never_called(
    client, config, fulfilment, redis, rng
) -> None:
    """With REVERSAL_PER_REFUND a refund in full is reversed under ``reverse:{pk}:{re}``; the
    API, the page and the CLI showed ``reverse:{pk}``, a key no call used, which a person
    reversing by hand could take for another reversal to make (merchant review)."""
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"], REVERSAL_PER_REFUND="true")
    pk, amount = paid(f, rng)
    f.work()
    events = refund_events(rng, pk, amount, amount)
    refund = events[0]["data"]["object"]["id"]
    for event in events:
        f.deliver(event)
    f.work()
    assert settled_as(redis, pk, "reversed")
    rv = api(client, f"payments/{pk}")["reversal"]
    assert rv["due"] and rv["idempotency_key"] is None
    assert [f["reversal_key"] for f in rv["refunds"]] == [f"reverse:{pk}:{refund}"]
    page = client.get(f"/ops/payments/{pk}", headers=BASIC).get_data(as_text=True)
    assert f"reverse:{pk}:{refund}" in page and f"<code>reverse:{pk}</code>" not in page
    assert "each refund under its own key" in page
    shown = run_cli(config, "payment", pk).stdout
    assert f"key reverse:{pk}:{refund})" in shown and "each refund under its own key" in shown
    assert f"reverse:{pk}," not in shown


def test_a_call_a_person_found_applied_nothing_is_not_said_never_called(
    client, fulfilment, redis, config, rng
) -> None:
    """Found by an outside review: a call interrupted (its worker died in it), then refunded
    in full, then a person's retry (they found it had not applied): refunded before any
    effect, yet the page and the CLI said "never called"."""
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"])
    pk, amount = paid(f, rng)
    redis.delete("rq:queue:fulfilment")
    start = f.attempts.start(pk, "job-1", replay_safe=False)
    assert f.attempts.mark_calling(pk, start.token)
    redis.hset(keys.payment(pk), "lease_until", 0)
    assert f.attempts.recover(pk) == "interrupted"
    for event in refund_events(rng, pk, amount, amount):
        f.deliver(event)
    redis.delete(keys.caller(f.attempts.caller))  # its process has left the call (died)
    assert f.attempts.record_decision(pk, "retry", ("interrupted",), "person")[0] == "ok"
    f.work()
    assert settled_as(redis, pk, "refunded_unfulfilled")
    page = client.get(f"/ops/payments/{pk}", headers=BASIC).get_data(as_text=True)
    shown = run_cli(config, "payment", pk).stdout
    for said in (page, " ".join(shown.split())):
        assert "never called" not in said and "a person found so" in said


def fulfilled(fulfilment, config, rng) -> tuple[Any, str, int]:
    """A payment paid and fulfilled, its reversal on the same downstream: (its ledger, its
    key, the amount paid)."""
    f = fulfilment(REVERSAL_ACTION=config["FULFILMENT_ACTION"])
    pk, amount = paid(f, rng)
    f.work()
    return f, pk, amount


def object_id(event: dict[str, Any]) -> str:
    return str(event["data"]["object"]["id"])


def test_an_open_dispute_is_shown_until_it_closes(client, config, fulfilment, redis, rng) -> None:
    """A dispute opened, its funds withdrawn: nothing is taken back yet, and the payment
    showed no dispute at all until it closed (merchant review)."""
    f, pk, amount = fulfilled(fulfilment, config, rng)
    created = dispute_event(rng, pk, amount, "needs_response", "charge.dispute.created")
    dispute = created["data"]["object"]["id"]
    for kind in ("created", "funds_withdrawn"):
        f.deliver(
            dispute_event(rng, pk, amount, "needs_response", f"charge.dispute.{kind}", dispute)
        )
    assert settled_as(redis, pk, "fulfilled")
    rv = api(client, f"payments/{pk}")["reversal"]
    assert (rv["open_dispute"], rv["dispute"], rv["taken_back"]) == (
        "charge.dispute.funds_withdrawn",
        None,
        None,
    )
    page = client.get(f"/ops/payments/{pk}", headers=BASIC).get_data(as_text=True)
    assert 'id="open-dispute">charge.dispute.funds_withdrawn' in page
    shown = " ".join(run_cli(config, "payment", pk).stdout.split())
    assert "dispute open │ charge.dispute.funds_withdrawn (nothing taken back" in shown
    f.deliver(dispute_event(rng, pk, amount, "lost", "charge.dispute.closed", dispute))
    f.work()
    rv = api(client, f"payments/{pk}")["reversal"]
    assert rv["open_dispute"] is None and rv["dispute"] == {"id": dispute, "status": "lost"}
    assert settled_as(redis, pk, "reversed")


def test_an_open_dispute_is_shown_after_its_events_expire(
    client, config, fulfilment, redis, rng
) -> None:
    """A card dispute stays open for weeks past EVENT_RETENTION_DAYS: read from its events
    alone, it vanished from the view once they expired (review). Also the latest by its
    ``created``, not by when it came."""
    f, pk, amount = fulfilled(fulfilment, config, rng)
    created = dispute_event(rng, pk, amount, "needs_response", "charge.dispute.created")
    withdrawn = dispute_event(
        rng, pk, amount, "needs_response", "charge.dispute.funds_withdrawn", object_id(created)
    )
    withdrawn["created"] = created["created"] + 60
    for event in (withdrawn, created):  # the later one first
        f.deliver(event)
        redis.delete(keys.event(event["id"]))  # as its TTL does, EVENT_RETENTION_DAYS on
    rv = api(client, f"payments/{pk}")["reversal"]
    assert rv["open_dispute"] == "charge.dispute.funds_withdrawn" and rv["dispute"] is None
    assert settled_as(redis, pk, "fulfilled")


def test_a_chargeback_after_an_inquiry_closed_is_shown_open(
    client, config, fulfilment, redis, rng
) -> None:
    """An inquiry closed (``warning_closed``), then a chargeback opened as a new dispute: the
    closed one hid it (review). Its close as lost then takes the payment back."""
    f, pk, amount = fulfilled(fulfilment, config, rng)
    inquiry = dispute_event(rng, pk, amount, "warning_needs_response", "charge.dispute.created")
    closed = dispute_event(
        rng, pk, amount, "warning_closed", "charge.dispute.closed", object_id(inquiry)
    )
    chargeback = dispute_event(rng, pk, amount, "needs_response", "charge.dispute.created")
    chargeback["created"] = inquiry["created"] + 86_400
    for event in (inquiry, closed):
        f.deliver(event)
    assert api(client, f"payments/{pk}")["reversal"]["open_dispute"] is None
    f.deliver(chargeback)
    f.work()
    rv = api(client, f"payments/{pk}")["reversal"]
    assert rv["open_dispute"] == "charge.dispute.created" and settled_as(redis, pk, "fulfilled")
    lost = dispute_event(rng, pk, amount, "lost", "charge.dispute.closed", object_id(chargeback))
    f.deliver(lost)
    f.work()
    rv = api(client, f"payments/{pk}")["reversal"]
    assert rv["open_dispute"] is None and rv["dispute"]["status"] == "lost"
    assert settled_as(redis, pk, "reversed")
