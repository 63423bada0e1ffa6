"""The real Stripe CLI (pinned in tests/stripe-cli) between a stand-in of Stripe and the real
service: ``stripe listen --print-secret`` gives the secret the service starts with, and the
two commands the banner prints (snapshot events, thin events) relay Stripe's deliveries to
gunicorn; the answers the CLI reports back to Stripe, the ledger's counts and the fulfilment
are checked. Loopback only; the CLI's telemetry and update check are off."""

import json
from pathlib import Path
from typing import Any

from ledger import keys
from ledger.read import stats as read_stats
from ledgerctl import samples
from ledgerctl.stripe_listen import forward_commands
from tests.integration.test_lua_purchases import purchase
from tests.integration.test_thin_events import payment_intent, thin_event
from tests.support.downstream_server import CountingDownstream
from tests.support.helpers import after_sweeps, stats
from tests.support.processes import wait_until
from tests.support.stripe_cli import API_KEY, CLI_SECRET, StripeCli
from tests.support.stripe_standin import StripeStandin


def answered(standin: StripeStandin, sent: dict[str, str]) -> dict[str, dict[str, Any]]:
    """name -> the CLI's webhook_response for each delivery, once all have come back."""
    found = {name: standin.response(delivery) for name, delivery in sent.items()}
    return {n: r for n, r in found.items() if r is not None} if all(found.values()) else {}


def test_stripe_listen_relays_stripe_deliveries_to_the_service(
    stack, redis, standin: StripeStandin, stripe_cli: StripeCli, tmp_path: Path, rng
) -> None:
    secret = stripe_cli.print_secret()
    assert secret == CLI_SECRET
    assert standin.sessions[-1]["authorization"] == f"Bearer {API_KEY}"
    with CountingDownstream() as downstream:
        s = stack(
            STRIPE_WEBHOOK_SECRET=secret,
            STRIPE_WEBHOOK_SECRET_LABELS="cli",  # as run.sh --stripe-cli labels it
            FULFILMENT_ACTION=downstream.url,
        )
        web = s.start_web()
        s.start_worker()
        s.start_sweeper()
        forward_to = f"{web.url.removeprefix('http://')}/webhooks/stripe"
        # The commands the banner prints, run as they are (plus the stand-in's base).
        logs = tmp_path / "listen.log", tmp_path / "listen-thin.log"
        for command, log in zip(forward_commands(forward_to, False), logs, strict=True):
            stripe_cli.listen(command, log)
        forms = [session["form"] for session in standin.sessions[-2:]]
        assert [f["websocket_features[]"] for f in forms] == [["webhooks"], ["v2_events"]]
        assert all(f["forward_to_url"] == [forward_to] for f in forms)

        checkout = purchase(rng)  # session, invoice.paid, payment_intent.succeeded
        created, charge, intent = samples.payment_events(rng)
        card = str(intent["data"]["object"]["id"])
        thin = thin_event(rng, "v1.payment_intent.succeeded", payment_intent(card))
        sent = {
            "session": standin.send(checkout[0]),
            "invoice": standin.send(checkout[1]),
            "checkout intent": standin.send(checkout[2]),
            "charge": standin.send(charge),
            "intent": standin.send(intent),
            "forgery": standin.send(charge, signing_secret="whsec_forged_0123456789"),
            "thin": standin.send(thin),
        }
        sent_events = (*checkout, charge, intent, thin)
        unasked = standin.send(created)  # not in --events: acknowledged, never forwarded
        wait_until(lambda: answered(standin, sent), timeout=60, what="the CLI's answers")
        # The CLI handles each message on its own goroutine: resend once the first is answered.
        sent["resend"] = standin.send(intent)
        got = wait_until(lambda: answered(standin, sent), timeout=60, what="the resend's answer")
        statuses = {name: answer["status"] for name, answer in got.items()}
        assert statuses == {**{name: 200 for name in sent}, "forgery": 400}
        bodies = {name: json.loads(answer["body"]) for name, answer in got.items()}
        assert bodies["intent"] == {"event_id": intent["id"], "deliveries": 1, "duplicate": False}
        assert bodies["resend"] == {"event_id": intent["id"], "deliveries": 2, "duplicate": True}
        assert bodies["forgery"] == {"error": "signature_mismatch"}
        assert got["forgery"]["forward_url"] == f"http://{forward_to}"
        wait_until(lambda: created["id"] in standin.acks(), what="the unasked event's ack")
        assert standin.response(unasked) is None
        assert "Stripe-Signature" in got["thin"]["request_headers"]

        counters = stats(redis)
        assert (counters["deliveries"], counters["events"], counters["duplicates"]) == (7, 6, 1)
        assert counters["rejected:signature_mismatch"] == 1
        sources = {e["id"]: redis.hget(keys.event(e["id"]), "src:stripe-cli") for e in sent_events}
        assert sources == {**{e["id"]: b"1" for e in sent_events}, intent["id"]: b"2"}
        # The CLI forwards concurrently: when invoice.paid comes first, the purchase is kept
        # under the invoice's id and the sweeper enqueues its job.
        purchase_keys = {
            str(checkout[2]["data"]["object"]["id"]),
            str(checkout[1]["data"]["object"]["id"]),
        }
        wait_until(lambda: read_stats.counters(redis).payments_by_state["fulfilled"] == 2, 60)
        after_sweeps(redis)
        assert sorted(downstream.calls.values()) == [1, 1]
        assert card in downstream.calls and len(purchase_keys & set(downstream.calls)) == 1
    # The CLI knows every snapshot type of the list (it warns about names it does not know).
    assert "isn't a valid event" not in logs[0].read_text()
