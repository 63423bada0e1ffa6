"""Event payloads as stored: zlib with a preset dictionary of Stripe JSON, behind a format
byte, so a 3.6 KB event is kept in about 0.2 KB (docs/BENCHMARKS.md, memory)."""

import zlib
from importlib import resources

FORMAT = b"\x01"
"""Stored payloads start with this byte: zlib with the v1 preset dictionary. A new
dictionary needs a new byte (old payloads must stay readable)."""

DICTIONARY = resources.files("ledger").joinpath("payload-v1.zdict").read_bytes()
"""32 KB of real Stripe test-mode payloads (ledgerctl/sample_events/): the keys and
structure every event repeats, so even a 2 KB event compresses well. Never edit it: add a
v2."""

LEVEL = 6


def compress_payload(body: bytes) -> bytes:
    """``body`` as stored: the format byte, then zlib with the dictionary."""
    packer = zlib.compressobj(LEVEL, zdict=DICTIONARY)
    return FORMAT + packer.compress(body) + packer.flush()


def decompress_payload(stored: bytes) -> bytes:
    """The payload as it was received."""
    if stored[:1] != FORMAT:
        raise ValueError(f"unknown payload format {stored[:1]!r}")
    unpacker = zlib.decompressobj(zdict=DICTIONARY)
    return unpacker.decompress(stored[1:]) + unpacker.flush()
