"""Stored payloads: the format byte and zlib with the v1 dictionary, whichever way the
compressor is set up (a copy of one primed with the dictionary, for speed)."""

import random
import threading
import zlib

from ledger.payloads import DICTIONARY, FORMAT, LEVEL, compress_payload, decompress_payload
from ledgerctl import samples


def fresh(body: bytes) -> bytes:
    """The v1 format as first written: a new compressor given the dictionary."""
    packer = zlib.compressobj(LEVEL, zdict=DICTIONARY)
    return FORMAT + packer.compress(body) + packer.flush()


def bodies(n: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    return [samples.encode(e) for _ in range(n) for e in samples.payment_events(rng, checkout=True)]


def test_a_payload_is_stored_as_the_same_bytes_as_with_a_new_compressor() -> None:
    for body in bodies(20):
        assert compress_payload(body) == fresh(body)
        assert decompress_payload(compress_payload(body)) == body


def test_threads_compressing_at_once_each_get_their_own_payload() -> None:
    """gthread workers share the primed compressor: each call works on its own copy."""
    work = bodies(15, seed=8)
    wrong: list[int] = []

    def compress_all(offset: int) -> None:
        for i in range(len(work)):
            body = work[(i + offset) % len(work)]
            if decompress_payload(compress_payload(body)) != body:
                wrong.append(i)

    threads = [threading.Thread(target=compress_all, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
