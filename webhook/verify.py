"""Stripe signature verification against one or more secrets (rotation, Stripe CLI)."""

import re
import time

from stripe import SignatureVerificationError, WebhookSignature

from webhook.exceptions import Rejected

_STAMP = re.compile(r"-?[0-9]{1,20}")


def header_timestamp(header: str) -> int:
    """The header's ``t=``; raises Rejected for a malformed header or one without v1."""
    if not header.isascii():  # signatures are hex; stripe's compare_digest raises on non-ASCII
        raise Rejected("malformed_signature_header", detail="non-ASCII characters")
    stamps: list[str] = []
    has_v1 = False
    for item in header.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep:
            raise Rejected("malformed_signature_header", detail="item without '='")
        if name == "t":
            stamps.append(value)
        elif name == "v1":
            has_v1 = True
    if len(stamps) != 1 or not _STAMP.fullmatch(stamps[0]):
        raise Rejected("malformed_signature_header", detail="needs exactly one integer t=")
    if not has_v1:
        raise Rejected("no_v1_signature")
    return int(stamps[0])


def verify(body: str, header: str | None, secrets: list[str], tolerance: int) -> int:
    """Index of the first secret that verifies ``header`` for ``body``, else raise Rejected.

    Stripe's library checks only that a timestamp is not too old; one from the future
    beyond the tolerance is rejected here too, so a captured request cannot be replayed
    for ever.
    """
    if not header:
        raise Rejected("missing_signature")
    stamp = header_timestamp(header)
    stale = False
    for index, secret in enumerate(secrets):
        try:
            WebhookSignature.verify_header(body, header, secret, tolerance)
        except SignatureVerificationError as exc:
            stale = stale or "tolerance" in str(exc)
            continue
        if stamp > time.time() + tolerance:
            raise Rejected("timestamp_outside_tolerance", detail="timestamp in the future")
        return index
    if stale:
        raise Rejected("timestamp_outside_tolerance")
    raise Rejected("signature_mismatch")
