"""Bad input: every rejection is a 4xx with a JSON reason, counted, and writes no event."""

import gzip
import hashlib
import json
import math
import random
import time

import pytest

from ledger import keys
from ledger.settings import fingerprint
from ledgerctl import samples
from tests.support.constants import OLD_SECRET, SECRET
from tests.support.helpers import STRIPE_UA, ledger_keys, paid_event, signed_headers, stats
from tests.unit.test_verify import ROWS, Row, header_for
from webhook.receiver import PATH

NO_EVENT_KEYS = {keys.STATS, keys.REJECTIONS}


def post(client, body: bytes, headers: dict[str, str]):
    return client.post("/webhooks/stripe", data=body, headers=headers)


def assert_rejected(response, redis, reason: str, status: int = 400) -> None:
    assert response.status_code == status
    assert response.get_json()["error"] == reason
    counters = stats(redis)
    assert counters["rejected"] == 1
    assert counters[f"rejected:{reason}"] == 1
    assert "deliveries" not in counters and "events" not in counters
    remaining = {k for k in ledger_keys(redis) if not k.startswith(keys.SERIES_PREFIX)}
    assert remaining == NO_EVENT_KEYS
    record = json.loads(redis.lindex(keys.REJECTIONS, 0))
    assert record["reason"] == reason and "at" in record and "remote" in record


def body_and_headers(rng, **sign_kwargs):
    _, body = paid_event(rng)
    return body, signed_headers(body, **sign_kwargs)


def test_missing_header(client, redis, rng) -> None:
    body, headers = body_and_headers(rng)
    del headers["Stripe-Signature"]
    assert_rejected(post(client, body, headers), redis, "missing_signature")


@pytest.mark.parametrize("header", ["garbage", "t=abc,v1=00", "v1=00", "t=1;v1=00"])
def test_malformed_header(client, redis, rng, header: str) -> None:
    body, headers = body_and_headers(rng)
    headers["Stripe-Signature"] = header
    assert_rejected(post(client, body, headers), redis, "malformed_signature_header")


def test_no_v1_signature(client, redis, rng) -> None:
    body, headers = body_and_headers(rng)
    headers["Stripe-Signature"] = f"t={int(time.time())},v0=abc"
    assert_rejected(post(client, body, headers), redis, "no_v1_signature")


def test_signature_mismatch_with_every_secret(client, redis, rng) -> None:
    body, headers = body_and_headers(rng, secret="whsec_someone_else")
    assert_rejected(post(client, body, headers), redis, "signature_mismatch")


def test_tampered_body(client, redis, rng) -> None:
    body, headers = body_and_headers(rng)
    tampered = body.replace(b'"livemode": false', b'"livemode": true', 1)
    assert tampered != body
    assert_rejected(post(client, tampered, headers), redis, "signature_mismatch")


@pytest.mark.parametrize("offset", [-301, -86400, 301, 10**9])
def test_timestamp_outside_tolerance(client, redis, rng, offset: int) -> None:
    # Rounded up: int() would make +301 as little as +300.0 by the time the view runs.
    body, headers = body_and_headers(rng, timestamp=math.ceil(time.time()) + offset)
    assert_rejected(post(client, body, headers), redis, "timestamp_outside_tolerance")


def test_body_too_large(client, redis) -> None:
    body = b"{" + b" " * (512 * 1024) + b"}"
    assert_rejected(post(client, body, signed_headers(body)), redis, "body_too_large", 413)


def test_non_utf8_body(client, redis) -> None:
    body = b'{"id": "evt_\xff"}'
    headers = signed_headers(b"{}")
    assert_rejected(post(client, body, headers), redis, "invalid_encoding")


def test_non_json_body(client, redis) -> None:
    body = b"this is not json"
    assert_rejected(post(client, body, signed_headers(body)), redis, "invalid_json")


@pytest.mark.parametrize(
    "event",
    [
        [],
        {"id": "ch_123", "type": "charge.succeeded", "data": {"object": {}}},
        {"id": "evt_1", "data": {"object": {}}},
        {"id": "evt_1", "type": "x", "data": {}},
        {"id": "evt_1", "type": "x", "data": {"object": "str"}},
        {"id": 12, "type": "x", "data": {"object": {}}},
    ],
)
def test_json_that_is_not_a_stripe_event(client, redis, event) -> None:
    body = json.dumps(event).encode()
    assert_rejected(post(client, body, signed_headers(body)), redis, "not_a_stripe_event")


def test_wrong_method(client, redis) -> None:
    assert_rejected(client.get("/webhooks/stripe"), redis, "method_not_allowed", 405)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_wrong_content_type(client, redis, rng, content_type: str) -> None:
    body, headers = body_and_headers(rng)
    headers["Content-Type"] = content_type
    assert_rejected(post(client, body, headers), redis, "unsupported_media_type", 415)


def test_compressed_request_body(client, redis, rng) -> None:
    body, headers = body_and_headers(rng)
    headers["Content-Encoding"] = "gzip"
    assert_rejected(
        post(client, gzip.compress(body), headers), redis, "unsupported_media_type", 415
    )


def test_rejection_keeps_size_and_hash_never_the_body(client, redis) -> None:
    body = b'{"secret": "card 4242 4242 4242 4242"}'
    post(client, body, signed_headers(body, secret="whsec_wrong"))
    record = json.loads(redis.lindex(keys.REJECTIONS, 0))
    assert record["size"] == len(body)
    assert record["sha256"] == hashlib.sha256(body).hexdigest()
    dump = b"".join(redis.dump(k) or b"" for k in redis.scan_iter())
    assert b"4242" not in dump


def test_rotated_secret_is_accepted_and_recorded_by_its_fingerprint(client, redis, rng) -> None:
    event, body = paid_event(rng)
    response = post(client, body, signed_headers(body, secret=OLD_SECRET))
    assert response.status_code == 200
    label = fingerprint(OLD_SECRET)
    assert label == "sha256:" + hashlib.sha256(OLD_SECRET.encode()).hexdigest()[:8]
    assert redis.hget(keys.event(event["id"]), "secret") == label.encode()
    assert stats(redis)[f"secret:{label}"] == 1
    assert redis.hexists(keys.SECRETS_LAST_SEEN, label)
    dump = b"".join(redis.dump(k) or b"" for k in redis.scan_iter())
    assert SECRET.encode() not in dump and OLD_SECRET.encode() not in dump


@pytest.mark.parametrize("labels", [("", ""), ("main,cli", "cli,main")])
def test_reordering_the_secrets_keeps_their_labels(config, redis, rng, labels) -> None:
    """Moving the CLI's secret to the front (as the README's run.sh hint does) changes
    nothing in the ledger: a secret keeps its label or fingerprint, not a position."""
    from webhook import create_app

    orders = (f"{SECRET},{OLD_SECRET}", f"{OLD_SECRET},{SECRET}")
    for secrets, names in zip(orders, labels, strict=True):
        app = create_app(
            {**config, "STRIPE_WEBHOOK_SECRET": secrets, "STRIPE_WEBHOOK_SECRET_LABELS": names}
        )
        _, body = paid_event(rng)
        post(app.test_client(), body, signed_headers(body, secret=OLD_SECRET))
    label = "cli" if labels[0] else fingerprint(OLD_SECRET)
    assert {k: v for k, v in stats(redis).items() if k.startswith("secret:")} == {
        f"secret:{label}": 2
    }


@pytest.mark.parametrize(
    ("peer", "recorded"),
    [
        ("::ffff:10.0.0.7", "203.0.113.9"),  # the proxy through a dual-stack socket
        ("10.0.0.7", "203.0.113.9"),
        ("::ffff:192.0.2.4", "192.0.2.4"),  # not a proxy: its header ignored, IPv4 kept
    ],
)
def test_a_rejection_records_the_client_a_trusted_proxy_names(
    config, redis, peer: str, recorded: str
) -> None:
    """TRUSTED_PROXIES lists IPv4 networks; a dual-stack listener reports an IPv4 peer as
    ``::ffff:a.b.c.d``: the same proxy, so its X-Forwarded-For names the client."""
    from webhook import create_app

    app = create_app({**config, "TRUSTED_PROXIES": "10.0.0.0/8"})
    app.test_client().post(
        "/webhooks/stripe", data=b"{}",
        headers={"Content-Type": "application/json", "X-Forwarded-For": "203.0.113.9"},
        environ_base={"REMOTE_ADDR": peer},
    )  # fmt: skip
    assert json.loads(redis.lindex(keys.REJECTIONS, 0))["remote"] == recorded


def test_accepted_delivery_answer(client, redis, rng) -> None:
    event, body = paid_event(rng)
    first = post(client, body, signed_headers(body))
    again = post(client, body, signed_headers(body))
    assert first.status_code == 200 and again.status_code == 200
    assert first.get_json() == {"event_id": event["id"], "deliveries": 1, "duplicate": False}
    assert again.get_json() == {"event_id": event["id"], "deliveries": 2, "duplicate": True}
    assert first.mimetype == "application/json"


@pytest.mark.parametrize("path", ["//webhooks/stripe", "///webhooks/stripe"])
def test_a_delivery_to_the_path_with_its_leading_slash_doubled_is_recorded(
    client, redis, rng, path: str
) -> None:
    """An endpoint URL joined from ``https://host/`` and ``/webhooks/stripe``: Flask's routing
    reads ``//webhooks/stripe`` as the endpoint's path, so a signed POST there is a delivery,
    never a 405 telling a POST to use POST."""
    event, body = paid_event(rng)
    answer = client.post(
        PATH, data=body, headers=signed_headers(body), environ_overrides={"PATH_INFO": path}
    )
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json() == {"event_id": event["id"], "deliveries": 1, "duplicate": False}
    assert stats(redis)["deliveries"] == 1 and "rejected" not in stats(redis)


def test_same_id_different_bytes_is_counted_and_flagged(client, redis, rng) -> None:
    event, body = paid_event(rng)
    post(client, body, signed_headers(body))
    changed = samples.encode({**event, "pending_webhooks": 7})
    assert post(client, changed, signed_headers(changed)).get_json()["deliveries"] == 2
    record = redis.hgetall(keys.event(event["id"]))
    assert record[b"conflicts"] == b"1"
    assert record[b"sha"] == hashlib.sha256(body).hexdigest().encode()
    assert record[b"conflict_sha"] == hashlib.sha256(changed).hexdigest().encode()
    assert stats(redis)["conflicts"] == 1


def test_user_agent_alone_does_not_make_a_delivery_stripe(client, redis, rng) -> None:
    event, body = paid_event(rng)
    headers = signed_headers(body)
    headers["User-Agent"] = "curl/8"
    post(client, body, headers)
    assert redis.hget(keys.event(event["id"]), "src:other") == b"1"
    assert STRIPE_UA.startswith("Stripe/")


def test_sources_replay_header_and_cli_secret_label(config, redis, rng) -> None:
    from webhook import create_app

    client = create_app({**config, "STRIPE_WEBHOOK_SECRET_LABELS": "dashboard,cli"}).test_client()
    event, body = paid_event(rng)
    post(client, body, signed_headers(body, secret=OLD_SECRET))
    replayed = signed_headers(body) | {"X-Webhook-Replay": "run-1"}
    post(client, body, replayed)
    record = redis.hgetall(keys.event(event["id"]))
    assert record[b"src:stripe-cli"] == b"1" and record[b"src:replay"] == b"1"
    assert stats(redis)["source:stripe-cli"] == 1 and stats(redis)["source:replay"] == 1


def test_non_ascii_signature_is_a_clean_rejection(client, redis, rng) -> None:
    body, headers = body_and_headers(rng)
    headers["Stripe-Signature"] = f"t={int(time.time())},v1=é"
    assert_rejected(post(client, body, headers), redis, "malformed_signature_header")


@pytest.mark.parametrize("method", ["OPTIONS", "TRACE", "PROPFIND"])
def test_every_other_method_is_405_json_and_counted(client, redis, method: str) -> None:
    assert_rejected(
        client.open("/webhooks/stripe", method=method), redis, "method_not_allowed", 405
    )


def aof_bytes(redis) -> int:
    return int(redis.info("persistence")["aof_current_size"])


def test_forged_requests_cost_no_key_and_no_append_only_file_write(client, redis) -> None:
    """10,000 rejections: counted, but no key per request and nothing fsynced to the AOF."""
    forged = {"Content-Type": "application/json", "Stripe-Signature": "t=1,v1=00"}
    post(client, b"{}", forged)  # the scripts are loaded and the counters exist
    keys_before, aof_before = redis.dbsize(), aof_bytes(redis)
    for _ in range(10_000):
        post(client, b'{"id": "evt_forged"}', forged)
    assert stats(redis)["rejected"] == 10_001
    assert redis.llen(keys.REJECTIONS) == 1000
    assert redis.dbsize() <= keys_before + 1  # + 1: the loop may cross into the next hour
    assert aof_bytes(redis) - aof_before < 1024


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_each_row_through_the_receiver(client, redis, row: Row) -> None:
    event, raw = paid_event(random.Random(row.name))
    headers = {"Content-Type": "application/json", "User-Agent": STRIPE_UA}
    if header := header_for(row.template, raw.decode(), int(time.time())):
        headers["Stripe-Signature"] = header
    answer = client.post("/webhooks/stripe", data=raw, headers=headers)
    if row.reason is None:
        assert answer.status_code == 200 and answer.get_json()["event_id"] == event["id"]
    else:
        assert answer.status_code == 400 and answer.get_json()["error"] == row.reason
        assert stats(redis)[f"rejected:{row.reason}"] == 1


@pytest.mark.parametrize(
    "odd",
    [{"amount_received": -5}, {"currency": "usdé"}, {"amount_received": True}],
    ids=["negative amount", "non-ASCII currency", "boolean amount"],
)
def test_a_paid_event_no_fingerprint_fits_is_recorded_not_answered_503(
    config, redis, rng, odd: dict[str, object]
) -> None:
    """With FULFIL_UNLINKED_INVOICES, a paid event's amount and currency make its fingerprint;
    values no fingerprint can carry (record_delivery.lua's fp_parts) make none, so the event
    is recorded: a 503 would be answered to every retry of it for as long as Stripe retries."""
    from webhook import create_app

    client = create_app({**config, "FULFIL_UNLINKED_INVOICES": "true"}).test_client()
    event = samples.event_of_type(rng, "payment_intent.succeeded")
    event["data"]["object"].update(odd)
    body = samples.encode(event)
    answer = post(client, body, signed_headers(body))
    assert answer.status_code == 200, answer.get_json()
    assert stats(redis)["deliveries"] == 1
