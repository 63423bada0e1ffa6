"""Event payloads as stored: Zstandard with a preset dictionary of Stripe JSON, behind a
format byte, so a 3.6 KB event is kept in about 0.2 KB (docs/BENCHMARKS.md, memory).

Zstandard, not zlib, because its dictionary is digested once per process: zlib loads the
32 KB dictionary again for every payload, which made compression ~7 % of a delivery's CPU.
"""

import sys
from importlib import resources

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the same module, published for older Pythons
    from backports import zstd

FORMAT = b"\x02"
"""Stored payloads start with this byte: Zstandard with the v1 dictionary as raw content.
A new dictionary or codec needs a new byte (old payloads must stay readable)."""

DICTIONARY = resources.files("ledger").joinpath("payload-v1.zdict").read_bytes()
"""32 KB of real Stripe test-mode payloads (ledgerctl/sample_events/): the keys and
structure every event repeats, so even a 2 KB event compresses well. Never edit it: add a
v2."""

LEVEL = 11
"""At 11, real payloads the dictionary was not made from (bench/heldout/) shrink to 0.122 of
their bytes together, against 0.130 under zlib level 6 (the smallest, 880 B, to 0.161
against 0.152), in a third of zlib's time or less."""

_DICT = zstd.ZstdDict(DICTIONARY, is_raw=True)
# One per process, shared by its threads (it holds its own lock): a compressor made for each
# payload would cost more than the compression itself.
_COMPRESSOR = zstd.ZstdCompressor(level=LEVEL, zstd_dict=_DICT.as_digested_dict)


def compress_payload(body: bytes) -> bytes:
    """``body`` as stored: the format byte, then one Zstandard frame."""
    return FORMAT + _COMPRESSOR.compress(body, zstd.ZstdCompressor.FLUSH_FRAME)


def decompress_payload(stored: bytes) -> bytes:
    """The payload as it was received."""
    kind, packed = stored[:1], stored[1:]
    if kind == FORMAT:
        return zstd.decompress(packed, zstd_dict=_DICT)
    raise ValueError(f"unknown payload format {kind!r}")
