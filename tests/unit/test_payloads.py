"""Stored payloads read back byte for byte; an unknown format is refused."""

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from ledger.payloads import FORMAT, compress_payload, decompress_payload
from ledgerctl import samples


@pytest.fixture
def bodies() -> list[bytes]:
    rng = random.Random(18)
    events = samples.payment_events(rng, checkout=True)
    events += [samples.event_of_type(rng, kind) for kind in ("charge.refunded", "invoice.paid")]
    return [samples.encode(event) for event in events]


def test_payloads_round_trip_and_shrink(bodies: list[bytes]) -> None:
    for body in bodies:
        stored = compress_payload(body)
        assert stored[:1] == FORMAT
        assert decompress_payload(stored) == body
        assert len(stored) < len(body) / 5


def test_an_unknown_format_is_refused_not_guessed() -> None:
    with pytest.raises(ValueError, match="unknown payload format"):
        decompress_payload(b"\x07" + compress_payload(b"{}")[1:])


def test_one_compressor_serves_many_threads(bodies: list[bytes]) -> None:
    """gthread workers share the process's compressor."""
    inputs = [body + str(i).encode() * (i % 40) for i, body in enumerate(bodies * 200)]
    with ThreadPoolExecutor(4) as pool:
        stored = list(pool.map(compress_payload, inputs))
    assert [decompress_payload(s) for s in stored] == inputs
