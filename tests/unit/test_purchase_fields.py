"""What a payment keeps of each object its events carry (ledger/purchase_fields.py), on real
payload shapes of several API versions: ids and what was bought, never card details."""

import json
from pathlib import Path

from ledger.purchase import purchase_of
from ledger.purchase_fields import purchase_fields
from ledgerctl import samples

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stripe"


def obj(event_type: str) -> dict:
    return json.loads(samples.template(event_type))["data"]["object"]


def test_a_payment_intent_of_api_2020_gives_its_succeeded_charge_not_its_card() -> None:
    pi = obj("payment_intent.succeeded")
    pi["charges"]["data"][0]["id"] = "ch_paid"
    pi["metadata"] = {"order": "7"}
    fields = purchase_fields(pi)
    assert fields == {"p_pi": pi["id"], "p_charge": "ch_paid", "p_md_pi": '{"order":"7"}'}
    assert "payment_method_details" not in json.dumps(fields)


def test_a_payment_intent_of_a_later_api_names_latest_charge() -> None:
    pi = {"object": "payment_intent", "id": "pi_1", "latest_charge": "ch_9", "customer": "cus_1"}
    assert purchase_fields(pi) == {"p_pi": "pi_1", "p_charge": "ch_9", "p_customer": "cus_1"}


def test_a_charge_gives_its_id_its_payment_intent_and_customer_only() -> None:
    charge = obj("charge.succeeded")
    charge.update(id="ch_1", customer="cus_1", payment_intent="pi_1")
    assert purchase_fields(charge) == {"p_charge": "ch_1", "p_pi": "pi_1", "p_customer": "cus_1"}


def test_a_subscription_renewal_invoice_as_stripe_sent_it() -> None:
    event = json.loads((FIXTURES / "invoice.paid.subscription_cycle.json").read_text())
    fields = purchase_fields(event["data"]["object"])
    got = purchase_of("in_1KJqKBJDPojXS6LNJbvLUgEy", 1, fields)
    assert got.invoice is not None
    assert (got.invoice.id, got.invoice.subscription, got.invoice.billing_reason) == (
        "in_1KJqKBJDPojXS6LNJbvLUgEy",
        "sub_JsuPyCPhXWfZar",
        "subscription_cycle",
    )
    [line] = got.invoice.lines
    assert (line.price, line.product, line.quantity, line.amount) == (
        "price_1IDQm5JDPojXS6LNM31hxKzp",
        "prod_Ip4vqwv3EJ7Mi0",
        1,
        0,
    )
    assert got.customer == "cus_JsuO3bmrj0QlAw" and got.subscription == "sub_JsuPyCPhXWfZar"
    assert got.payment_intent is None and got.metadata.invoice == {}


def test_an_invoice_of_api_basil_names_its_subscription_and_price_in_new_places() -> None:
    invoice = {
        "object": "invoice",
        "id": "in_1",
        "billing_reason": "subscription_create",
        "parent": {"subscription_details": {"subscription": "sub_1"}},
        "lines": {
            "data": [
                {
                    "id": "il_1",
                    "amount": 500,
                    "quantity": 2,
                    "pricing": {"price_details": {"price": "price_1", "product": "prod_1"}},
                }
            ]
        },
    }
    got = purchase_of("in_1", 1, purchase_fields(invoice))
    assert got.subscription == "sub_1" and got.invoice is not None
    assert (got.invoice.lines[0].price, got.invoice.lines[0].product) == ("price_1", "prod_1")


def test_a_session_gives_who_bought_and_its_own_metadata() -> None:
    session = obj("checkout.session.completed")
    session.update(client_reference_id="order_1", metadata={"a": "1"})
    session["customer_details"]["name"] = "Jenny Rosen"
    got = purchase_of("pi_1", 1, purchase_fields(session))
    assert got.checkout_session is not None
    assert got.checkout_session.customer_details.email == "stripe@example.com"
    assert (got.client_reference_id, got.customer_name) == ("order_1", "Jenny Rosen")
    assert got.metadata.checkout_session == {"a": "1"}
    assert got.metadata.payment_intent == {} and got.metadata.invoice is None


def test_objects_of_other_kinds_give_nothing() -> None:
    assert purchase_fields({"object": "refund", "id": "re_1", "customer": "cus_1"}) == {}
    assert purchase_fields({}) == {}
