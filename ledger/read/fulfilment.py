"""The shared gate of fulfilment as people read it: a pause, the circuit breakers (one per
downstream: ledger/breakers.py), the rate and who waits (ledger/gate.py keeps the gate)."""

from datetime import datetime
from typing import Literal

from redis import Redis

from ledger import keys, limits
from ledger.breakers import reversal_apart
from ledger.clock import now_ms
from ledger.read.base import View
from ledger.settings import Settings
from ledger.stored import decode_hash, ms_time, text


class Pause(View):
    since: datetime | None
    by: str
    reason: str


class Breaker(View):
    state: Literal["closed", "open", "probing"]
    failures: int
    threshold: int
    cooldown_s: float
    opened_at: datetime | None
    open_until: datetime | None
    last_error: str | None
    opens: int
    probes: int


class Fulfilment(View):
    paused: Pause | None
    resumed_at: datetime | None
    resumed_by: str | None
    breaker: Breaker
    """FULFILMENT_ACTION's downstream's (and REVERSAL_ACTION's when it calls the same one)."""
    reversal_breaker: Breaker | None
    """REVERSAL_ACTION's downstream's when it is another (None: it shares ``breaker``, or
    there is no REVERSAL_ACTION)."""
    max_rate: int
    calls_last_second: int
    waiting: dict[str, int]
    """Payments waiting without a call, by reason: at the gate (paused, breaker,
    reversal_breaker, rate) and for their purchase (stripe_api: Stripe's API did not answer;
    checkout_session: the session's event has not come, CHECKOUT_WAIT_SECONDS)."""


PURCHASE_WAITS = (keys.STRIPE_WAIT, keys.CHECKOUT_WAIT)


def purchase_waits(redis: Redis) -> dict[str, int]:
    """How many payments wait for Stripe's API or for their Checkout Session. They have no
    set of their own (lua/stripe_wait.lua keeps only the payment's ``waiting``): read from
    the retrying payments, the oldest limits.PURCHASE_WAITS_READ of them."""
    retrying = redis.zrange(keys.state_index("retrying"), 0, limits.PURCHASE_WAITS_READ - 1)
    with redis.pipeline(transaction=False) as pipe:
        for payment_key in retrying:
            pipe.hget(keys.payment(text(payment_key)), "waiting")
        reasons = [text(r) for r in pipe.execute() if r is not None]
    return {reason: reasons.count(reason) for reason in PURCHASE_WAITS}


def status(redis: Redis, settings: Settings) -> Fulfilment:
    """What the dashboard, the API, ``summary`` and /metrics show."""
    now = now_ms(redis)
    with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.BREAKER)
        pipe.hgetall(keys.REVERSAL_BREAKER.state)
        pipe.hgetall(keys.PAUSE)
        pipe.hgetall(keys.RESUMED)
        pipe.zcount(keys.CALL_LOG, now - 1000, "+inf")
        for reason in keys.WAIT_REASONS:
            pipe.zcard(keys.waiting(reason))
        breaker, reversal, paused, resumed, calls, *waiting = pipe.execute()
    p, r = decode_hash(paused), decode_hash(resumed)
    pause = None
    if p:
        pause = Pause(since=ms_time(p.get("since")), by=p.get("by", ""), reason=p.get("reason", ""))
    return Fulfilment(
        paused=pause,
        resumed_at=ms_time(r.get("at")),
        resumed_by=r.get("by"),
        breaker=breaker_view(decode_hash(breaker), now, settings),
        reversal_breaker=(
            breaker_view(decode_hash(reversal), now, settings) if reversal_apart(settings) else None
        ),
        max_rate=settings.FULFILMENT_MAX_RATE,
        calls_last_second=int(calls),
        waiting=dict(zip(keys.WAIT_REASONS, map(int, waiting), strict=True))
        | purchase_waits(redis),
    )


def breakers(f: Fulfilment) -> dict[str, Breaker]:
    """Each breaker by the action whose calls it gates: ``fulfilment`` (also the reversal's,
    on the same downstream) and ``reversal`` when REVERSAL_ACTION calls another one."""
    apart = {"reversal": f.reversal_breaker} if f.reversal_breaker is not None else {}
    return {"fulfilment": f.breaker, **apart}


def breaker_view(b: dict[str, str], now: int, settings: Settings) -> Breaker:
    state = b.get("state", "closed")
    open_until = int(b.get("open_until") or 0)
    if state == "open" and open_until <= now and int(b.get("probe_until") or 0) > now:
        state = "probing"
    return Breaker(
        state=state,  # type: ignore[arg-type]
        failures=int(b.get("failures") or 0),
        threshold=settings.BREAKER_THRESHOLD,
        cooldown_s=settings.BREAKER_COOLDOWN_SECONDS,
        opened_at=ms_time(b.get("opened_at")),
        open_until=ms_time(open_until) if state != "closed" else None,
        last_error=b.get("last_error") or None,
        opens=int(b.get("opens") or 0),
        probes=int(b.get("probes") or 0),
    )
