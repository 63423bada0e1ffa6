"""Stripe signature verification against one or more secrets (rotation, Stripe CLI).

``Stripe-Signature`` is parsed once, by stripe-python's rules
(``WebhookSignature._get_timestamp_and_signatures``), so a header passes exactly when
stripe-python would pass it and each rejection names the step that failed:

- items are split on ``,``; an item's name precedes its first ``=`` and must match exactly
  (``" v1"`` after ``", "`` is not ``v1``); its value ends at a second ``=`` (``t=T=x``);
  empty items, items without ``=`` and other names are ignored;
- the timestamp is ``int()`` of the first ``t`` (so ``+T`` and `` T`` pass); no ``t``, a
  ``t`` or ``v1`` without ``=``, or a first ``t`` that is not an integer:
  ``malformed_signature_header``; no ``v1``: ``no_v1_signature``;
- no secret signs any ``v1``: ``signature_mismatch``; one does but the timestamp is older
  than the tolerance: ``timestamp_outside_tolerance``.

Two differences, on purpose: a timestamp further in the future than the tolerance is
refused too (a captured request must not be replayable for ever); and a non-ASCII ``v1``,
on which stripe-python's ``compare_digest`` raises TypeError, can never equal a hex digest,
so it is skipped, and when nothing else verifies the answer is a 400
``malformed_signature_header``, not a 500.
"""

import hmac
import time
from collections.abc import Sequence
from dataclasses import dataclass

from webhook.exceptions import Rejected

SCHEME = "v1"
SIGNATURE_REASONS = (
    "missing_signature",
    "malformed_signature_header",
    "no_v1_signature",
    "signature_mismatch",
    "timestamp_outside_tolerance",
)
"""The rejections a signature check gives (/metrics reports each from 0, for the alerts)."""


@dataclass(frozen=True, slots=True)
class SignatureHeader:
    """A parsed ``Stripe-Signature``: the first ``t`` and every ``v1`` value, in order."""

    timestamp: int
    signatures: list[str]


def parse_header(header: str) -> SignatureHeader:
    """The header's timestamp and v1 signatures, by stripe-python's rules; else Rejected."""
    stamps: list[str] = []
    signatures: list[str] = []
    for item in header.split(","):
        name, sep, rest = item.partition("=")
        if name != "t" and name != SCHEME:
            continue
        if not sep:
            raise Rejected("malformed_signature_header", detail=f"'{name}' without '='")
        (stamps if name == "t" else signatures).append(rest.partition("=")[0])
    if not stamps:
        raise Rejected("malformed_signature_header", detail="no t=")
    try:
        timestamp = int(stamps[0])
    except ValueError as exc:
        raise Rejected("malformed_signature_header", detail="t= is not an integer") from exc
    if not signatures:
        raise Rejected("no_v1_signature")
    return SignatureHeader(timestamp, signatures)


def matching_secret(body: str, parsed: SignatureHeader, secrets: Sequence[str]) -> int:
    """Index of the first secret that signed ``body`` at the header's time, else Rejected."""
    signed = b"%d.%s" % (parsed.timestamp, body.encode())
    candidates = [s for s in parsed.signatures if s.isascii()]
    for index, secret in enumerate(secrets):
        expected = hmac.digest(secret.encode(), signed, "sha256").hex()
        if any(hmac.compare_digest(expected, s) for s in candidates):
            return index
    if len(candidates) < len(parsed.signatures):
        raise Rejected("malformed_signature_header", detail="non-ASCII v1 signature")
    raise Rejected("signature_mismatch")


def check_time(timestamp: int, tolerance: int) -> None:
    """Refuse a timestamp more than ``tolerance`` seconds from now (0: no limit)."""
    if not tolerance:
        return
    now = time.time()
    if timestamp < now - tolerance:
        raise Rejected("timestamp_outside_tolerance")
    if timestamp > now + tolerance:
        raise Rejected("timestamp_outside_tolerance", detail="timestamp in the future")


def verify(body: str, header: str | None, secrets: Sequence[str], tolerance: int) -> int:
    """Index of the first secret that verifies ``header`` for ``body``, else raise Rejected."""
    if not header:
        raise Rejected("missing_signature")
    parsed = parse_header(header)
    index = matching_secret(body, parsed, secrets)
    check_time(parsed.timestamp, tolerance)
    return index
