"""Reconcile runs as people read them; ledger/reconcile.py runs them and builds these."""

from datetime import datetime

from ledger.read.base import View


class MissingEvent(View):
    id: str
    type: str
    payment_key: str | None
    pays: bool
    created_at: datetime | None


class ReconcileRun(View):
    started_at: datetime | None
    finished_at: datetime | None
    window_start: datetime | None
    trigger: str
    applied: bool
    every_event: bool
    listed: int
    missing_total: int
    by_type: dict[str, int]
    payments: list[str]
    missing: list[MissingEvent]
    recorded: int
    arrived: int
    enqueued: int
    unreadable: int
    error: str | None


class ReconcileList(View):
    interval_s: float
    runs: list[ReconcileRun]
