"""Hostile input: property-based tests and a fuzz pass. Every request ends in a clear 4xx
(or 200 for a validly signed Stripe event), never a 5xx or a stack trace, and never a
ledger change other than the rejection counters."""

import json
import random
import socket
import time

import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis

from ledger import keys
from ledgerctl import samples
from tests.support.constants import SECRET
from tests.support.helpers import STRIPE_UA, ledger_keys, paid_event, signed_headers, stats

REJECTION_STATUSES = {400, 405, 413, 415}
HYPOTHESIS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
NOW = int(time.time())
# Any character a header can carry (HTTP itself cannot carry CR, LF or NUL in a value).
chars = st.characters(exclude_characters="\r\n\x00", exclude_categories=("Cs",))

stamps = st.one_of(
    st.integers(-(10**25), 10**25).map(str),
    st.text(chars, max_size=30),
    st.just(str(NOW)),
    st.just("１２３"),
)
items = st.one_of(
    stamps.map(lambda t: f"t={t}"),
    st.text(alphabet="0123456789abcdef", max_size=70).map(lambda s: f"v1={s}"),
    st.text(chars, max_size=40),
    st.just("v0=" + "0" * 64),
)
headers = st.one_of(
    st.lists(items, max_size=8).map(",".join),
    st.integers(1, 3000).map(lambda n: f"t={NOW}," + ",".join(["v1=" + "a" * 64] * n)),
    st.text(chars, max_size=300),
)


def event_keys(redis: Redis) -> set[str]:
    return {k for k in ledger_keys(redis) if k.startswith((keys.event(""), keys.payment("")))}


@HYPOTHESIS
@given(header=headers, body=st.binary(max_size=2000))
def test_any_header_and_body_is_a_clean_rejection(client, redis, header: str, body: bytes) -> None:
    before = stats(redis).get("rejected", 0)
    answer = client.post(
        "/webhooks/stripe",
        data=body,
        headers={
            "Content-Type": "application/json",
            "Stripe-Signature": header,
            "User-Agent": STRIPE_UA,
        },
    )
    assert answer.status_code in REJECTION_STATUSES, answer.get_data()
    assert isinstance(answer.get_json()["error"], str)
    assert stats(redis)["rejected"] == before + 1
    assert not event_keys(redis)
    assert "deliveries" not in stats(redis)


json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=50)
    ),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


def mutate(body: bytes, how: str, rng: random.Random) -> bytes:
    event = json.loads(body)
    if how == "truncate":
        return body[: rng.randrange(1, len(body))]
    if how == "deep":
        depth = rng.choice((50, 1500, 20000))
        return (
            b'{"id": "evt_deep", "type": "x", "data": {"object": '
            + b"[" * depth
            + b"]" * depth
            + b"}}"
        )
    if how == "huge_string":
        event["data"]["object"]["description"] = "x" * rng.choice((1000, 200_000))
    if how == "duplicate_keys":
        return body.replace(b'"id": "evt_', b'"id": 12, "id": "evt_', 1)
    if how == "wrong_id_type":
        event["id"] = rng.choice((12, None, ["evt_1"], {"a": 1}, "ch_123"))
    if how == "wrong_type_type":
        event["type"] = rng.choice((12, None, "", ["x"]))
    if how == "wrong_data":
        event["data"] = rng.choice(("x", [], {"object": 1}, None))
    return json.dumps(event).encode()


MUTATIONS = [
    "truncate",
    "deep",
    "huge_string",
    "duplicate_keys",
    "wrong_id_type",
    "wrong_type_type",
    "wrong_data",
]


@HYPOTHESIS
@given(how=st.sampled_from(MUTATIONS), seed=st.integers(0, 2**32))
def test_signed_mutated_bodies(client, redis, how: str, seed: int) -> None:
    """Correctly signed but broken bodies: a reason for each, or a clean 200 if still valid."""
    rng = random.Random(seed)
    _, body = paid_event(rng)
    mutated = mutate(body, how, rng)
    before = event_keys(redis)
    answer = client.post("/webhooks/stripe", data=mutated, headers=signed_headers(mutated))
    if answer.status_code == 200:  # e.g. a huge description is still a Stripe event
        assert how in ("huge_string", "duplicate_keys")
        assert answer.get_json()["deliveries"] >= 1
        return
    assert answer.status_code in REJECTION_STATUSES
    assert answer.get_json()["error"] in {"invalid_json", "not_a_stripe_event", "body_too_large"}
    assert event_keys(redis) == before


@HYPOTHESIS
@given(value=json_values)
def test_signed_arbitrary_json_is_never_a_server_error(client, redis, value) -> None:
    body = json.dumps(value).encode()
    answer = client.post("/webhooks/stripe", data=body, headers=signed_headers(body))
    assert answer.status_code in REJECTION_STATUSES
    # NaN/Infinity and integers beyond 64 bits are not JSON to a strict parser
    assert answer.get_json()["error"] in {"not_a_stripe_event", "invalid_json"}


def test_captured_delivery_replayed_inside_and_outside_the_window(client, redis, rng) -> None:
    event, body = paid_event(rng)
    captured = signed_headers(body, timestamp=int(time.time()) - 200)  # signed 200 s ago
    assert client.post("/webhooks/stripe", data=body, headers=captured).status_code == 200
    again = client.post("/webhooks/stripe", data=body, headers=captured)
    assert again.status_code == 200 and again.get_json() == {
        "event_id": event["id"],
        "deliveries": 2,
        "duplicate": True,
    }
    stale = signed_headers(body, timestamp=int(time.time()) - 301)
    answer = client.post("/webhooks/stripe", data=body, headers=stale)
    assert answer.status_code == 400 and answer.get_json()["error"] == "timestamp_outside_tolerance"
    assert redis.hget(keys.event(event["id"]), "n") == b"2"


def raw_request(port: int, data: bytes, pause: float = 0.0, chunks: int = 1) -> bytes:
    """Send raw bytes (optionally slowly, in chunks) and return whatever comes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        size = max(1, len(data) // chunks)
        for i in range(0, len(data), size):
            sock.sendall(data[i : i + size])
            time.sleep(pause)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def test_fuzz_over_http(web, redis, rng) -> None:
    """A few hundred mutated requests, malformed HTTP and slow clients against gunicorn."""
    url = f"{web.url}/webhooks/stripe"
    statuses = []
    for i in range(200):
        _, body = paid_event(rng)
        how = MUTATIONS[i % len(MUTATIONS)]
        mutated = mutate(body, how, rng)
        headers = (
            signed_headers(mutated)
            if i % 2
            else {
                "Content-Type": "application/json",
                "Stripe-Signature": f"t={rng.randint(-9, 9)},v1=zz",
            }
        )
        statuses.append(requests.post(url, data=mutated, headers=headers, timeout=10).status_code)
    assert set(statuses) <= REJECTION_STATUSES | {200}
    assert max(statuses) < 500

    _, body = paid_event(rng)
    head = (
        f"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Stripe-Signature: {samples.sign(body, SECRET)}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    slow = raw_request(web.port, head + body, pause=0.05, chunks=30)  # a slow but honest client
    assert slow.startswith(b"HTTP/1.1 200")
    partial = raw_request(web.port, head + body[: len(body) // 2])  # gives up half-way
    assert not partial.startswith(b"HTTP/1.1 2") and not partial.startswith(b"HTTP/1.1 5")
    garbage = raw_request(web.port, b"\x00\xffNOT HTTP\r\n\r\n")
    assert garbage.startswith(b"HTTP/1.1 400") or garbage == b""
    too_big = raw_request(
        web.port, head.replace(f"Content-Length: {len(body)}".encode(), b"Content-Length: 99999999")
    )
    assert too_big.startswith(b"HTTP/1.1 413")
    web.stop()
    assert web.log is not None
    log = web.log.read_text()
    assert "Traceback" not in log and '"status":5' not in log


def post_raw(port: int, body: bytes, signature_lines: list[bytes]) -> bytes:
    """POST ``body`` with these raw ``Stripe-Signature`` lines; the status line comes back."""
    head = b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += b"".join(b"Stripe-Signature: " + line + b"\r\n" for line in signature_lines)
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
    return raw_request(port, head + body).split(b"\r\n", 1)[0]


def test_signature_header_lines_and_bytes_over_http(web, redis, rng) -> None:
    """What gunicorn hands the app: repeated lines joined with ',' and raw bytes as latin-1."""
    _, body = paid_event(rng)
    signed = samples.sign(body, SECRET).encode()
    stamp, v1 = signed.split(b",")
    accepted = [
        [signed, signed],  # two lines, each valid
        [stamp, v1],  # one header split over two lines
        [signed, b"v0=" + b"0" * 64],
        [signed + b",x=\xc3\xa9"],  # UTF-8 bytes in an item the libraries ignore
        [signed + b",\xff"],
    ]
    for lines in accepted:
        assert post_raw(web.port, body, lines) == b"HTTP/1.1 200 OK", lines
    refused = [[stamp + b",v1=\xc3\xa9"], [stamp + b", " + v1], [v1 + b", " + stamp]]
    for lines in refused:
        assert post_raw(web.port, body, lines) == b"HTTP/1.1 400 BAD REQUEST", lines
    assert stats(redis)["deliveries"] == len(accepted)
    assert {k: v for k, v in stats(redis).items() if k.startswith("rejected:")} == {
        "rejected:malformed_signature_header": 2,
        "rejected:no_v1_signature": 1,
    }
