"""Rejected requests as people read them: the latest records kept (never a body, only its
hash and size); the counts by reason are in ledger/read/stats.py."""

from datetime import datetime

import orjson
from redis import Redis

from ledger import keys
from ledger.read.base import View
from ledger.stored import ms_time, optional, whole


class Rejection(View):
    at: datetime | None
    reason: str
    status: int | None
    size: int | None
    body_sha256: str | None
    remote: str | None
    method: str | None


class RejectionList(View):
    rejections: list[Rejection]
    limit: int


def rejections(redis: Redis, limit: int = 100) -> list[Rejection]:
    """The latest rejections kept (newest first)."""
    return [_rejection(r) for r in redis.lrange(keys.REJECTIONS, 0, limit - 1)]


def _rejection(stored: bytes | str) -> Rejection:
    try:
        record = orjson.loads(stored)
    except orjson.JSONDecodeError:
        record = {}
    if not isinstance(record, dict):
        record = {}
    return Rejection(
        at=ms_time(record.get("at")),
        reason=str(record.get("reason", "unreadable")),
        status=whole(record.get("status")),
        size=whole(record.get("size")),
        body_sha256=optional(record.get("sha256")),
        remote=optional(record.get("remote")),
        method=optional(record.get("method")),
    )
